"""checks' contains and equals: the field against the eval suite's expected output of the
trace's turn, compared as documented, skipped with the reason when there is none, and
the config's problems by key path."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.result import MetricResult
from spanscore.core.session import Session, TraceSummary
from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.checks import Checks, ChecksConfig, comparable
from tests.support.agent_spans import make_span
from tests.support.rag_trace import CHAIN, kind, traces_of
from tests.support.spans import request_of

SUITE = """\
cases:
  - id: oslo
    turns:
      - message: What's the weather in Oslo?
        expected_response: "Snowing,  -3 °C"
      - message: And tomorrow?
      - message: What should I wear?
        expected_response: A warm coat
"""


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE, encoding="utf-8")
    return str(path)


def trace(user_input: str, output: str, case_id: str | None = None):
    attributes = kind(CHAIN, **{"input.value": user_input, "output.value": output})
    if case_id is not None:
        attributes["eval.case.id"] = case_id
    [one] = traces_of(request_of([make_span("agent", attributes)]))
    return one


def checks(suite: str, **metric) -> Checks:
    config = ChecksConfig.model_validate({"dataset": suite, "metrics": {"rule": {"field": "output", **metric}}})
    return Checks("checks", config)


def outputs(processor: Checks, one, session: Session | None = None) -> list:
    return list(asyncio.run(processor.process_trace(one, session)))


def test_comparable_collapses_whitespace_normalizes_unicode_and_folds_case_only_when_asked():
    assert comparable("  Snowing,\n\t-3 °C  ", False) == "Snowing, -3 °C"
    assert comparable("Cafe\u0301", False) == "Caf\u00e9"  # NFC: e + combining acute is é
    assert comparable("STRASSE Straße", True) == "strasse strasse"
    assert comparable("Snowing", False) != comparable("snowing", False)


def test_equals_passes_on_the_same_text_with_other_whitespace_and_says_what_it_compared(suite):
    [result] = outputs(
        checks(suite, equals="expected_output"), trace("What's the weather in Oslo?", "Snowing, -3 °C\n")
    )
    assert isinstance(result, MetricResult)
    assert (result.score, result.passed, result.metadata) == (1.0, True, {"check": "equals"})
    assert result.explanation == "output equals the expected output of case oslo turn 0 (whitespace collapsed)"


def test_equals_keeps_case_unless_told_and_says_where_the_texts_part(suite):
    lower = trace("What's the weather in Oslo?", "snowing, -3 °C")
    [result] = outputs(checks(suite, equals="expected_output"), lower)
    assert result.score == 0.0
    assert result.explanation == (
        "output differs from the expected output of case oslo turn 0 at character 0 (whitespace collapsed): "
        "expected Snowing,  -3 °C, got snowing, -3 °C"
    )
    [result] = outputs(checks(suite, equals="expected_output", ignore_case=True), lower)
    assert (result.score, result.explanation) == (
        1.0,
        "output equals the expected output of case oslo turn 0 (whitespace collapsed, case ignored)",
    )
    # A longer answer that starts with the expected one differs where the expected one ends.
    [result] = outputs(checks(suite, equals="expected_output"), trace("x", "Snowing, -3 °C today", case_id="oslo"))
    assert result.score == 0.0 and " at character 14 " in result.explanation


def test_contains_finds_the_expected_output_inside_a_longer_answer(suite):
    answer = "In Oslo it is\nsnowing,   -3 °C right now."
    [result] = outputs(checks(suite, contains="expected_output", ignore_case=True), trace("x", answer, case_id="oslo"))
    assert (result.score, result.explanation) == (
        1.0,
        "output contains the expected output of case oslo turn 0 at character 14 (whitespace collapsed, case ignored)",
    )
    [result] = outputs(checks(suite, contains="expected_output"), trace("x", answer, case_id="oslo"))
    assert (result.score, result.explanation) == (
        0.0,
        "output (41 characters) does not contain the expected output of case oslo turn 0 (whitespace collapsed): "
        "Snowing,  -3 °C",
    )


def test_no_case_or_no_expected_response_is_skipped_with_the_reason_not_failed(suite):
    [skipped] = outputs(checks(suite, equals="expected_output"), trace("Hello", "Hi"))
    assert skipped == SpanAttribute(
        "eval.rule.skipped",
        "the trace joins no case of the dataset: no eval.case.id, and its first user message starts no case",
    )
    # The other checks of the processor are not affected by the skip.
    config = ChecksConfig.model_validate(
        {
            "dataset": suite,
            "metrics": {"same": {"field": "output", "equals": "expected_output"}, "short": {"max_duration": "1s"}},
        }
    )
    skipped, short = outputs(Checks("checks", config), trace("Hello", "Hi"))
    assert isinstance(skipped, SpanAttribute) and skipped.key == "eval.same.skipped"
    assert (short.name, short.score) == ("short", 1.0)


def test_each_turn_of_a_session_is_compared_with_its_own_expected_response(suite):
    processor = checks(suite, contains="expected_output", ignore_case=True)
    assert processor.uses_sessions  # the turn is the trace's place in its session
    session = Session("s", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    found = []
    for user, answer in [
        ("What's the weather in Oslo?", "Snowing, -3 °C."),
        ("And tomorrow?", "Sunny."),
        ("What should I wear?", "A WARM COAT and boots."),
    ]:
        one = trace(user, answer)
        [out] = outputs(processor, one, session)
        found.append(out.score if isinstance(out, MetricResult) else (out.key, out.value))
        session.traces.append(TraceSummary.of(one))  # as the pipeline does after the processors
    assert found == [1.0, ("eval.rule.skipped", "case oslo turn 1 has no expected_response"), 1.0]


def test_the_revision_follows_the_dataset_for_the_checks_that_read_it(suite, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(SUITE.replace("A warm coat", "A raincoat"), encoding="utf-8")

    def revisions(dataset: str) -> tuple[str, str]:
        config = ChecksConfig.model_validate(
            {
                "dataset": dataset,
                "metrics": {"same": {"field": "output", "equals": "expected_output"}, "quick": {"max_duration": "1s"}},
            }
        )
        processor = Checks("checks", config)
        return processor.provenance("same").revision, processor.provenance("quick").revision

    (same, quick), (same_other, quick_other) = revisions(suite), revisions(str(other))
    assert same != same_other and quick == quick_other
    assert revisions(suite) == (same, quick)  # and is stable


def problems(checks_section: dict) -> list[str]:
    text = yaml.safe_dump(
        {
            "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}},
            "processors": {"checks": checks_section},
            "exporters": {"debug": {}},
            "service": {
                "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["checks"], "exporters": ["debug"]}}
            },
        }
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    return sorted(raised.value.problems)


def test_every_expected_output_problem_is_reported_at_its_key_path_in_one_run(suite):
    at = "processors.checks.metrics."
    assert problems(
        {
            "metrics": {
                "no_dataset": {"field": "output", "contains": "expected_output"},
                "literal": {"field": "output", "equals": "Snowing"},
                "regex_case": {"field": "output", "regex": "a", "ignore_case": True},
            }
        }
    ) == sorted(
        [
            f"{at}no_dataset.contains: compares with the dataset's expected output: give the checks processor a "
            "dataset (an eval suite's cases, as ground_truth reads them) (got 'expected_output')",
            f"{at}literal.equals: compares with the dataset's expected output: give the checks processor a dataset "
            "(an eval suite's cases, as ground_truth reads them) (got 'Snowing')",
            f"{at}regex_case: ignore_case belongs to contains and equals (for a regex, write (?i))",
        ]
    )
    assert problems(
        {
            "dataset": suite,
            "metrics": {
                "literal": {"field": "output", "equals": "Snowing"},
                "on_llm": {"on": "llm", "field": "output", "contains": "expected_output"},
                "on_session": {"on": "session", "field": "output", "equals": "expected_output"},
                "no_field": {"equals": "expected_output"},
            },
        }
    ) == sorted(
        [
            f"{at}literal.equals: expected expected_output (the answer the dataset expects of the trace's turn); "
            "for a fixed text use regex (got 'Snowing')",
            f"{at}on_llm: contains compares with the answer expected of a turn, the trace's: it takes on: trace",
            f"{at}on_session: equals compares with the answer expected of a turn, the trace's: it takes on: trace",
            f"{at}no_field: equals checks a field: give field: input, output, context or attributes.KEY",
        ]
    )


def test_a_bad_dataset_is_reported_as_ground_truth_reports_it_and_not_again_per_metric(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases:\n  - id: a\n    turns: [{message: hi, expected_respons: hello}]\n", encoding="utf-8")
    found = problems({"dataset": str(bad), "metrics": {"same": {"field": "output", "equals": "expected_output"}}})
    assert found == [
        f"processors.checks.dataset: {bad} is invalid:\n    cases[0] (id a).turns[0].expected_respons: unknown key"
    ]
