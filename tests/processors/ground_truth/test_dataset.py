import json
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from spanscore.processors.eval_dataset import (
    Case,
    Dataset,
    DatasetError,
    Expected,
    ExpectedArgument,
    ExpectedToolCall,
    Subgoal,
    Turn,
    load_dataset,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "weather-suite.yaml"
NO_JUDGE_EXAMPLE = EXAMPLE.with_name("weather-suite-no-judge.yaml")

FULL_YAML = """\
cases:
  - id: oslo-weather
    user_instruction: Find out what to wear in Oslo today.
    turns:
      - message: What's the weather in Oslo?
        expected_response: Snowing, -3C
      - message: And tomorrow?
    subgoals:
      - details: Tells the user it is snowing in Oslo
        turn: 0
      - details: Suggests warm clothes
    expected_tool_calls:
      - tool: weather
        turn: 0
        parameters: [{name: city, value: Oslo}, {name: units, value: null}]
        output: {check: a weather report}
      - tool: forecast
        parameters: [{name: city, check: a Norwegian city}, {name: days, value: 1}]
    tool_sequence_matters: true
  - id: paris
    user_instruction: Is it sunny in Paris?
    expected_tool_calls:
      - tool: weather
        output: {value: {temp_c: 21, sky: sunny}}
"""

FULL_JSONL = [
    {
        "id": "oslo-weather",
        "user_instruction": "Find out what to wear in Oslo today.",
        "turns": [
            {"message": "What's the weather in Oslo?", "expected_response": "Snowing, -3C"},
            {"message": "And tomorrow?"},
        ],
        "subgoals": [
            {"details": "Tells the user it is snowing in Oslo", "turn": 0},
            {"details": "Suggests warm clothes"},
        ],
        "expected_tool_calls": [
            {
                "tool": "weather",
                "turn": 0,
                "parameters": [{"name": "city", "value": "Oslo"}, {"name": "units", "value": None}],
                "output": {"check": "a weather report"},
            },
            {
                "tool": "forecast",
                "parameters": [{"name": "city", "check": "a Norwegian city"}, {"name": "days", "value": 1}],
            },
        ],
        "tool_sequence_matters": True,
    },
    {
        "id": "paris",
        "user_instruction": "Is it sunny in Paris?",
        "expected_tool_calls": [{"tool": "weather", "output": {"value": {"temp_c": 21, "sky": "sunny"}}}],
    },
]

SUBGOAL = {"subgoals": [{"details": "Answers"}]}
GRADES_NOTHING = "grades nothing; give subgoals, expected_tool_calls or a turn's expected_response"
AMBIGUOUS = "starts with the same user message, so a session starting with it cannot be joined to one case"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def write_yaml(tmp_path: Path, text: str) -> Path:
    return write(tmp_path, "suite.yaml", textwrap.dedent(text))


def write_jsonl(tmp_path: Path, *lines: object) -> Path:
    return write(tmp_path, "suite.jsonl", "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def load_yaml(tmp_path: Path, text: str) -> Dataset:
    return load_dataset(write_yaml(tmp_path, text))


def load_jsonl(tmp_path: Path, *lines: object) -> Dataset:
    return load_dataset(write_jsonl(tmp_path, *lines))


def file_problems(path: Path) -> list[str]:
    with pytest.raises(DatasetError) as raised:
        load_dataset(path)
    return raised.value.problems


def yaml_problems(tmp_path: Path, text: str) -> list[str]:
    return file_problems(write_yaml(tmp_path, text))


def jsonl_problems(tmp_path: Path, *lines: object) -> list[str]:
    return file_problems(write_jsonl(tmp_path, *lines))


def cases_problems(tmp_path: Path, *cases: dict) -> list[str]:
    return yaml_problems(tmp_path, yaml.safe_dump({"cases": list(cases)}, sort_keys=False))


# Loading


def test_a_full_yaml_dataset_and_the_same_as_jsonl_load_to_equal_datasets(tmp_path):
    from_yaml = load_yaml(tmp_path, FULL_YAML)
    from_jsonl = load_jsonl(tmp_path, *FULL_JSONL)
    assert from_yaml == from_jsonl
    assert from_yaml.cases[0] == Case(
        id="oslo-weather",
        user_instruction="Find out what to wear in Oslo today.",
        turns=[
            Turn(message="What's the weather in Oslo?", expected_response="Snowing, -3C"),
            Turn(message="And tomorrow?"),
        ],
        subgoals=[
            Subgoal(details="Tells the user it is snowing in Oslo", turn=0),
            Subgoal(details="Suggests warm clothes"),
        ],
        expected_tool_calls=[
            ExpectedToolCall(
                tool="weather",
                turn=0,
                parameters=[ExpectedArgument(name="city", value="Oslo"), ExpectedArgument(name="units", value=None)],
                output=Expected(check="a weather report"),
            ),
            ExpectedToolCall(
                tool="forecast",
                parameters=[
                    ExpectedArgument(name="city", check="a Norwegian city"),
                    ExpectedArgument(name="days", value=1),
                ],
            ),
        ],
        tool_sequence_matters=True,
    )
    assert from_yaml.cases[1] == Case(
        id="paris",
        user_instruction="Is it sunny in Paris?",
        expected_tool_calls=[ExpectedToolCall(tool="weather", output=Expected(value={"temp_c": 21, "sky": "sunny"}))],
    )


def test_optional_fields_default_to_none_empty_and_unordered(tmp_path):
    case = load_yaml(tmp_path, "cases: [{id: a, subgoals: [{details: d}]}]").cases[0]
    assert (case.user_instruction, case.turns, case.expected_tool_calls) == (None, [], [])
    assert case.tool_sequence_matters is False
    assert case.subgoals[0].turn is None


def test_the_yml_extension_is_yaml_and_extensions_are_case_insensitive(tmp_path):
    text = "cases: [{id: a, subgoals: [{details: d}]}]"
    assert load_dataset(write(tmp_path, "a.yml", text)) == load_dataset(write(tmp_path, "b.YAML", text))


def test_blank_jsonl_lines_are_skipped_and_do_not_shift_line_numbers(tmp_path):
    problems = jsonl_problems(tmp_path, {"id": "a", **SUBGOAL}, "", "   ", {"id": "b"})
    assert problems == [
        f"line 4 (id b): {GRADES_NOTHING}",
    ]


@pytest.mark.parametrize("example", [EXAMPLE, NO_JUDGE_EXAMPLE], ids=lambda path: path.name)
def test_the_example_weather_suites_load(example):
    dataset = load_dataset(example)
    assert [case.id for case in dataset.cases] == ["oslo-weather", "paris-umbrella", "paris-then-lyon"]
    # The session of examples/weather-agent.json joins by its first message.
    assert dataset.match_first_message("What's the weather in Paris?") is dataset.by_id("paris-then-lyon")


def test_the_no_judge_example_suite_grades_only_what_needs_no_judge():
    for case in load_dataset(NO_JUDGE_EXAMPLE).cases:
        assert case.subgoals == [], case.id
        assert all(turn.expected_response is None for turn in case.turns), case.id
        items = [p for call in case.expected_tool_calls for p in call.parameters]
        items += [call.output for call in case.expected_tool_calls if call.output is not None]
        assert items and all(item.kind == "value" for item in items), case.id


# Texts


def test_ids_tools_and_texts_are_whitespace_trimmed(tmp_path):
    case = load_yaml(
        tmp_path,
        """
        cases:
          - id: ' oslo '
            turns: [{message: ' Hi ', expected_response: ' Hello '}]
            subgoals: [{details: ' Greets '}]
            expected_tool_calls: [{tool: '  weather ', output: {check: ' a report '}}]
    """,
    ).cases[0]
    assert (case.id, case.subgoals[0].details) == ("oslo", "Greets")
    assert case.turns[0] == Turn(message="Hi", expected_response="Hello")
    assert case.expected_tool_calls[0] == ExpectedToolCall(tool="weather", output=Expected(check="a report"))


def test_blank_texts_are_errors(tmp_path):
    problems = cases_problems(
        tmp_path,
        {
            "id": " ",
            "turns": [{"message": ""}],
            "subgoals": [{"details": "  "}],
            "expected_tool_calls": [{"tool": "\t"}],
        },
    )
    assert problems == [
        "cases[0].id: must not be empty (got ' ')",
        "cases[0].turns[0].message: must not be empty (got '')",
        "cases[0].subgoals[0].details: must not be empty (got '  ')",
        "cases[0].expected_tool_calls[0].tool: must not be empty (got '\\t')",
    ]


# Expected items: value or check


def test_an_item_gives_a_value_or_a_check_and_kind_says_which(tmp_path):
    call = (
        load_yaml(
            tmp_path,
            """
        cases:
          - id: a
            expected_tool_calls:
              - tool: weather
                parameters: [{name: city, value: Oslo}, {name: region, check: a Norwegian county}]
                output: {value: [1, "2", true]}
    """,
        )
        .cases[0]
        .expected_tool_calls[0]
    )
    assert [(p.name, p.kind, p.value, p.check) for p in call.parameters] == [
        ("city", "value", "Oslo", None),
        ("region", "check", None, "a Norwegian county"),
    ]
    assert (call.output.kind, call.output.value) == ("value", [1, "2", True])


def test_value_null_expects_json_null_and_stays_distinct_from_an_absent_value(tmp_path):
    call = (
        load_yaml(
            tmp_path,
            """
        cases:
          - id: a
            expected_tool_calls: [{tool: t, parameters: [{name: units, value: null}], output: {value: null}}]
    """,
        )
        .cases[0]
        .expected_tool_calls[0]
    )
    assert (call.parameters[0].kind, call.parameters[0].value) == ("value", None)
    assert call.parameters[0].model_dump(exclude_unset=True) == {"name": "units", "value": None}
    assert (call.output.kind, call.output.value) == ("value", None)


def test_an_item_with_both_value_and_check_is_an_error_even_with_value_null(tmp_path):
    problems = yaml_problems(
        tmp_path,
        """
        cases:
          - id: oslo-weather
            expected_tool_calls:
              - tool: weather
                parameters: [{name: city, value: Oslo}, {name: units, value: null, check: metric}]
                output: {value: 3, check: a number}
    """,
    )
    assert problems == [
        "cases[0] (id oslo-weather).expected_tool_calls[0].parameters[1]: give either value or check, not both",
        "cases[0] (id oslo-weather).expected_tool_calls[0].output: give either value or check, not both",
    ]


def test_an_item_with_neither_value_nor_check_is_an_error(tmp_path):
    call = {"tool": "weather", "parameters": [{"name": "city"}], "output": {}}
    problems = cases_problems(tmp_path, {"id": "oslo-weather", "expected_tool_calls": [call]})
    assert problems == [
        "cases[0] (id oslo-weather).expected_tool_calls[0].parameters[0]: give either value or check",
        "cases[0] (id oslo-weather).expected_tool_calls[0].output: give either value or check",
    ]


def test_a_null_or_mistyped_check_is_an_error(tmp_path):
    problems = cases_problems(
        tmp_path,
        {
            "id": "a",
            "expected_tool_calls": [
                {"tool": "t", "parameters": [{"name": "p", "check": None}, {"name": "q", "check": 5}]}
            ],
        },
    )
    assert problems == [
        "cases[0] (id a).expected_tool_calls[0].parameters[0].check: give the check as text, or leave check out",
        "cases[0] (id a).expected_tool_calls[0].parameters[1].check: Input should be a valid string (got 5)",
    ]


def test_yaml_values_that_are_not_json_are_errors(tmp_path):
    problems = yaml_problems(
        tmp_path,
        """
        cases:
          - id: a
            expected_tool_calls:
              - tool: t
                parameters:
                  - {name: day, value: 2024-05-01}
                  - {name: ratio, value: [1, .nan]}
                  - {name: map, value: {1: one}}
    """,
    )
    assert problems == [
        "cases[0] (id a).expected_tool_calls[0].parameters[0].value: 2024-05-01 reads as a date, not a JSON value; "
        + "quote it to compare the text",
        "cases[0] (id a).expected_tool_calls[0].parameters[1].value: nan is not a JSON number",
        "cases[0] (id a).expected_tool_calls[0].parameters[2].value: key 1 is not a string, as JSON object keys are; "
        + "quote it",
    ]


def test_parameter_names_are_unique_within_a_call(tmp_path):
    problems = cases_problems(
        tmp_path,
        {
            "id": "a",
            "expected_tool_calls": [
                {
                    "tool": "t",
                    "parameters": [
                        {"name": "city", "value": "Oslo"},
                        {"name": "days", "value": 1},
                        {"name": "city", "check": "a city"},
                    ],
                }
            ],
        },
    )
    assert problems == [
        "cases[0] (id a).expected_tool_calls[0].parameters[2].name: duplicate name; parameters[0] has the same name",
    ]


def test_a_parameter_needs_a_name(tmp_path):
    call = {"tool": "t", "parameters": [{"value": 1}]}
    problems = cases_problems(tmp_path, {"id": "a", "expected_tool_calls": [call]})
    assert problems == ["cases[0] (id a).expected_tool_calls[0].parameters[0].name: Field required"]


# Shape and types


def test_unknown_keys_are_reported_at_every_level(tmp_path):
    problems = yaml_problems(
        tmp_path,
        """
        suite: weather
        cases:
          - id: a
            turn: [{message: hi}]
            subgoals: [{details: d, weight: 2}]
            expected_tool_calls: [{tool: t, parameters: [{name: p, value: 1, exact: true}]}]
    """,
    )
    assert problems == [
        "suite: unknown key",
        "cases[0] (id a).subgoals[0].weight: unknown key",
        "cases[0] (id a).expected_tool_calls[0].parameters[0].exact: unknown key",
        "cases[0] (id a).turn: unknown key",
    ]


def test_loose_types_are_errors_not_coerced(tmp_path):
    problems = cases_problems(
        tmp_path,
        {
            "id": "a",
            "turns": {"message": "hi"},
            "subgoals": [{"details": "d", "turn": "0"}, {"details": "e", "turn": -1}, "just text"],
            "expected_tool_calls": [{"tool": "t", "turn": True, "parameters": {"city": "Oslo"}}],
            "tool_sequence_matters": "no",
        },
    )
    assert problems == [
        "cases[0] (id a).turns: Input should be a valid list",
        "cases[0] (id a).subgoals[0].turn: Input should be a valid integer (got '0')",
        "cases[0] (id a).subgoals[1].turn: Input should be greater than or equal to 0 (got -1)",
        "cases[0] (id a).subgoals[2]: expected a mapping, got str 'just text'",
        "cases[0] (id a).expected_tool_calls[0].turn: Input should be a valid integer (got True)",
        "cases[0] (id a).expected_tool_calls[0].parameters: Input should be a valid list",
        "cases[0] (id a).tool_sequence_matters: Input should be a valid boolean (got 'no')",
    ]


def test_a_case_without_a_usable_id_is_named_by_position_only(tmp_path):
    problems = cases_problems(tmp_path, {"id": 7, **SUBGOAL}, {"subgoals": [{"details": "d"}]})
    assert problems == [
        "cases[0].id: Input should be a valid string (got 7)",
        "cases[1].id: Field required",
    ]


def test_a_case_that_is_not_a_mapping_is_an_error(tmp_path):
    assert cases_problems(tmp_path, {"id": "a", **SUBGOAL}, "oslo", None) == [
        "cases[1]: expected a mapping of case fields, got str 'oslo'",
        "cases[2]: expected a mapping of case fields, got null",
    ]


def test_a_missing_required_field_in_jsonl_names_the_line_and_case(tmp_path):
    problems = jsonl_problems(
        tmp_path,
        {"id": "a", **SUBGOAL},
        {"id": "b", **SUBGOAL},
        {"id": "oslo-weather", "subgoals": [{}]},
    )
    assert problems == ["line 3 (id oslo-weather).subgoals[0].details: Field required"]


def test_a_jsonl_line_that_is_not_json_is_reported_and_the_other_lines_still_validated(tmp_path):
    problems = jsonl_problems(tmp_path, {"id": "a", **SUBGOAL}, '{"id": "b",', {"id": "c"}, "[1, 2]")
    assert problems == [
        "line 2: not valid JSON: Expecting property name enclosed in double quotes (column 12)",
        f"line 3 (id c): {GRADES_NOTHING}",
        "line 4: expected a mapping of case fields, got a list",
    ]


def test_jsonl_nan_is_not_a_json_value(tmp_path):
    problems = jsonl_problems(tmp_path, '{"id": "a", "expected_tool_calls": [{"tool": "t", "output": {"value": NaN}}]}')
    assert problems == ["line 1 (id a).expected_tool_calls[0].output.value: nan is not a JSON number"]


def test_every_problem_of_every_case_is_listed_together(tmp_path):
    problems = cases_problems(
        tmp_path,
        {"id": "a", "subgoals": [{"details": "d", "extra": 1}]},
        {"id": "b", "expected_tool_calls": [{"tool": "t", "parameters": [{"name": "p"}]}], "colour": "red"},
    )
    assert problems == [
        "cases[0] (id a).subgoals[0].extra: unknown key",
        "cases[1] (id b).expected_tool_calls[0].parameters[0]: give either value or check",
        "cases[1] (id b).colour: unknown key",
    ]


# Files


def test_an_unreadable_file_is_an_error(tmp_path):
    assert file_problems(tmp_path / "missing.yaml") == [
        f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"
    ]


def test_a_file_that_is_not_utf8_is_an_error(tmp_path):
    path = tmp_path / "suite.jsonl"
    path.write_bytes(b'{"id": "caf\xe9"}\n')
    assert file_problems(path) == [f"{path}: cannot read: not UTF-8 text (invalid continuation byte at byte 11)"]


def test_an_unknown_extension_is_an_error(tmp_path):
    path = write(tmp_path, "suite.json", "[]")
    assert file_problems(path) == [f"{path}: unknown dataset format '.json'; name the file .yaml, .yml or .jsonl"]


def test_invalid_yaml_is_an_error_on_one_line(tmp_path):
    path = write(tmp_path, "suite.yaml", "cases:\n  - {id: a, subgoals: [{details: Oslo?}]}\n")
    assert file_problems(path) == [
        f"{path}: not valid YAML: while parsing a flow mapping, expected ',' or '}}', but got '?' (line 2, column 38)",
    ]


def test_yaml_that_is_not_a_mapping_with_a_cases_list_is_an_error(tmp_path):
    path = write(tmp_path, "suite.yaml", "- id: a\n")
    assert file_problems(path) == [f"{path}: expected a mapping with a cases list, got a list"]
    assert yaml_problems(tmp_path, "cases: {id: a}") == ["cases: expected a list of cases, got a mapping"]


@pytest.mark.parametrize("text", ["", "cases:", "cases: []", "{}"])
def test_a_yaml_dataset_without_cases_is_an_error(tmp_path, text):
    assert yaml_problems(tmp_path, text) == ["cases: no cases; a dataset needs at least one"]


def test_a_jsonl_dataset_without_cases_is_an_error(tmp_path):
    path = write(tmp_path, "suite.jsonl", "\n  \n")
    assert file_problems(path) == [f"{path}: no cases; a dataset needs at least one"]


def test_the_error_message_lists_every_problem():
    assert str(DatasetError(["a: x", "b: y"])) == "invalid dataset:\n  a: x\n  b: y"


# Across fields and cases


def test_a_turn_index_must_name_a_scripted_turn(tmp_path):
    problems = cases_problems(
        tmp_path,
        {
            "id": "a",
            "turns": [{"message": "hi"}, {"message": "and?"}],
            "subgoals": [{"details": "d", "turn": 1}, {"details": "e", "turn": 2}],
            "expected_tool_calls": [{"tool": "t", "turn": 5}],
        },
    )
    assert problems == [
        "cases[0] (id a).subgoals[1].turn: turn 2 is past the last scripted turn, 1 (turns count from 0)",
        "cases[0] (id a).expected_tool_calls[0].turn: turn 5 is past the last scripted turn, 1 (turns count from 0)",
    ]


def test_without_scripted_turns_any_turn_index_is_accepted(tmp_path):
    case = load_yaml(
        tmp_path,
        """
        cases: [{id: a, subgoals: [{details: d, turn: 4}], expected_tool_calls: [{tool: t, turn: 9}]}]
    """,
    ).cases[0]
    assert (case.subgoals[0].turn, case.expected_tool_calls[0].turn) == (4, 9)


def test_a_case_that_grades_nothing_is_an_error(tmp_path):
    problems = cases_problems(tmp_path, {"id": "a", "user_instruction": "Weather?", "turns": [{"message": "hi"}]})
    assert problems == [f"cases[0] (id a): {GRADES_NOTHING}"]


def test_an_expected_response_alone_grades_a_case(tmp_path):
    case = load_yaml(tmp_path, "cases: [{id: a, turns: [{message: hi}, {message: 'and?', expected_response: 'Yes.'}]}]")
    case = case.cases[0]
    assert case.turns[1].expected_response == "Yes."


def test_duplicate_ids_name_both_positions(tmp_path):
    problems = cases_problems(
        tmp_path,
        {"id": "oslo", **SUBGOAL},
        {"id": "paris", **SUBGOAL},
        {"id": " oslo", **SUBGOAL},
    )
    assert problems == ["cases[2] (id oslo).id: duplicate id; cases[0] has the same id"]
    problems = jsonl_problems(tmp_path, {"id": "oslo", **SUBGOAL}, {"id": "oslo", **SUBGOAL})
    assert problems == ["line 2 (id oslo).id: duplicate id; line 1 has the same id"]


def test_two_cases_starting_with_the_same_message_are_an_ambiguous_join(tmp_path):
    problems = cases_problems(
        tmp_path,
        {"id": "a", "turns": [{"message": "Weather in Oslo?"}], **SUBGOAL},
        {"id": "b", "turns": [{"message": " Weather in Oslo? "}, {"message": "Thanks"}], **SUBGOAL},
        {"id": "c", "user_instruction": "Weather in Oslo?", **SUBGOAL},
    )
    assert problems == [
        f"cases[1] (id b).turns[0].message: cases[0] {AMBIGUOUS}",
        f"cases[2] (id c).user_instruction: cases[0] {AMBIGUOUS}",
    ]


def test_an_instruction_equal_to_another_cases_first_turn_is_not_ambiguous_when_it_has_turns(tmp_path):
    dataset = load_yaml(
        tmp_path,
        """
        cases:
          - {id: a, turns: [{message: 'Weather in Oslo?'}], subgoals: [{details: d}]}
          - {id: b, user_instruction: 'Weather in Oslo?', turns: [{message: Hi}], subgoals: [{details: d}]}
    """,
    )
    assert [case.id for case in dataset.cases] == ["a", "b"]


def test_a_dataset_built_in_code_checks_ids_and_first_messages():
    case = Case(id="a", turns=[Turn(message="hi")], subgoals=[Subgoal(details="d")])
    with pytest.raises(ValidationError) as raised:
        Dataset(cases=[case, case])
    assert [error["msg"] for error in raised.value.errors()] == [
        f"cases[1].id: duplicate id; cases[0] has the same id; cases[1].turns[0].message: cases[0] {AMBIGUOUS}",
    ]


# Lookup and the join fallback


def test_cases_are_found_by_id(tmp_path):
    dataset = load_yaml(tmp_path, FULL_YAML)
    assert dataset.by_id("paris") is dataset.cases[1]
    assert dataset.by_id("lyon") is None


def test_the_join_fallback_matches_the_first_turn_message_trimmed(tmp_path):
    dataset = load_yaml(tmp_path, FULL_YAML)
    assert dataset.match_first_message("  What's the weather in Oslo?\n") is dataset.cases[0]


def test_the_join_fallback_uses_the_instruction_of_a_case_without_turns(tmp_path):
    dataset = load_yaml(tmp_path, FULL_YAML)
    assert dataset.match_first_message("Is it sunny in Paris?") is dataset.cases[1]


def test_the_join_fallback_ignores_the_instruction_of_a_case_with_turns(tmp_path):
    dataset = load_yaml(tmp_path, FULL_YAML)
    assert dataset.match_first_message("Find out what to wear in Oslo today.") is None


@pytest.mark.parametrize("text", ["And tomorrow?", "what's the weather in oslo?", ""])
def test_the_join_fallback_finds_nothing_for_other_messages(tmp_path, text):
    assert load_yaml(tmp_path, FULL_YAML).match_first_message(text) is None
