import pytest
import yaml

from spanscore.config.loader import ConfigError
from spanscore.core.problem_list import ProblemListError, kind_of, yaml_problem
from spanscore.processors.eval_dataset import DatasetError
from spanscore.processors.judge_metrics.examples import ExamplesError


@pytest.mark.parametrize(
    ("error", "what"), [(DatasetError, "dataset"), (ExamplesError, "examples"), (ConfigError, "config")]
)
def test_each_file_of_items_raises_the_one_problem_list_error(error: type[ProblemListError], what: str) -> None:
    raised = error(["cases[0].id: unknown key", "line 3: not valid JSON"])
    assert isinstance(raised, ProblemListError)
    assert raised.problems == ["cases[0].id: unknown key", "line 3: not valid JSON"]
    assert str(raised) == f"invalid {what}:\n  cases[0].id: unknown key\n  line 3: not valid JSON"


def test_a_config_problem_line_is_escaped_and_cut_short() -> None:
    raised = ConfigError(["receivers.otlp: \x1b[31m" + "x" * 5000])
    assert "\x1b" not in raised.problems[0]
    assert len(raised.problems[0]) < 1100


@pytest.mark.parametrize(
    ("value", "said"),
    [(None, "null"), ({"a": 1}, "a mapping"), ([1], "a list"), (3, "int 3"), ("no", "str 'no'")],
)
def test_a_value_is_named_by_its_kind(value: object, said: str) -> None:
    assert kind_of(value) == said


def test_a_yaml_error_is_one_line_with_its_place() -> None:
    with pytest.raises(yaml.YAMLError) as raised:
        yaml.safe_load("a: [1,\nb: 2 ?")
    said = yaml_problem(raised.value)
    assert "\n" not in said
    assert said.endswith(")") and "(line " in said
