"""Expected tool calls matched against the session's calls, and JSON equality."""

from __future__ import annotations

import math

import pytest

from spanscore.processors.metrics import (
    ActualCall,
    CallMatch,
    ExpectedCall,
    ExpectedOutput,
    ExpectedParameter,
    json_equal,
    match_expected_calls,
    tool_call_accuracy,
)


def weather(city: str = "Oslo", turn: int | None = None, **extra) -> dict:
    """An expected weather call on `city` as a dataset mapping."""
    return {"tool": "weather", "turn": turn, "parameters": [{"name": "city", "value": city}], **extra}


# --- json_equal ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Oslo", "Oslo"),
        (5, 5),
        (1, 1.0),  # JSON has one number type
        (0.5, 0.5),
        (True, True),
        (False, False),
        (None, None),
        ([1, "a", None], [1, "a", None]),
        ([1, 2], (1, 2)),  # both JSON arrays
        ({"a": 1, "b": [True]}, {"b": [True], "a": 1.0}),
        ({}, {}),
        ([], []),
    ],
)
def test_json_equal_values(a, b):
    assert json_equal(a, b)
    assert json_equal(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("5", 5),
        (True, 1),  # Python's True == 1 does not apply
        (False, 0),
        (True, 1.0),
        (None, 0),
        (None, ""),
        (None, False),
        ("", []),
        ([], {}),
        ([1], [1, 1]),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"a": 1, "b": 2}),
        ({"a": 1}, {"b": 1}),
        ({"a": True}, {"a": 1}),
        ([[1]], [["1"]]),
        ("Oslo", "oslo"),
        (math.nan, math.nan),
        (0.1 + 0.2, 0.3),  # no tolerance: numbers compare exactly
    ],
)
def test_json_unequal_values(a, b):
    assert not json_equal(a, b)
    assert not json_equal(b, a)


# --- matching --------------------------------------------------------------------------


def test_a_matching_call():
    matches = match_expected_calls([weather()], [(0, "weather", {"city": "Oslo"}, None)])
    assert matches == [CallMatch(matched=True, actual_index=0, reason=None)]


def test_names_are_trimmed_then_exact():
    assert match_expected_calls([weather()], [(0, " weather\n", {"city": "Oslo"}, None)])[0].matched
    assert match_expected_calls([{**weather(), "tool": " weather "}], [(0, "weather", {"city": "Oslo"}, None)])[
        0
    ].matched
    match = match_expected_calls([weather()], [(0, "Weather", {"city": "Oslo"}, None)])[0]
    assert match == CallMatch(matched=False, reason="no call to weather")


def test_a_wrong_value_says_what_was_called():
    match = match_expected_calls([weather(turn=0)], [(0, "weather", {"city": "Bergen"}, None)])[0]
    assert match == CallMatch(matched=False, reason="weather called with city='Bergen', expected 'Oslo'")


def test_values_are_type_sensitive():
    expected = [{"tool": "add", "parameters": [{"name": "a", "value": 5}, {"name": "b", "value": 1}]}]
    assert not match_expected_calls(expected, [(0, "add", {"a": "5", "b": 1}, None)])[0].matched
    assert not match_expected_calls(expected, [(0, "add", {"a": 5, "b": True}, None)])[0].matched
    assert match_expected_calls(expected, [(0, "add", {"a": 5.0, "b": 1}, None)])[0].matched


def test_a_missing_parameter_fails():
    match = match_expected_calls([weather()], [(0, "weather", {"town": "Oslo"}, None)])[0]
    assert match == CallMatch(matched=False, reason="weather called without city")


def test_an_expected_null_needs_the_parameter_present():
    expected = [{"tool": "f", "parameters": [{"name": "x", "value": None}]}]
    assert match_expected_calls(expected, [(0, "f", {"x": None}, None)])[0].matched
    assert not match_expected_calls(expected, [(0, "f", {}, None)])[0].matched


def test_extra_actual_parameters_are_ignored():
    assert match_expected_calls([weather()], [(0, "weather", {"city": "Oslo", "unit": "C"}, None)])[0].matched


def test_an_expected_call_without_parameters_matches_any_arguments():
    assert match_expected_calls([{"tool": "now"}], [(0, "now", {"tz": "UTC"}, None)])[0].matched


def test_the_turn_restricts_the_calls():
    actual = [(1, "weather", {"city": "Oslo"}, None)]
    assert match_expected_calls([weather(turn=0)], actual) == [
        CallMatch(matched=False, reason="no call to weather in turn 0"),
    ]
    assert match_expected_calls([weather(turn=1)], actual) == [CallMatch(matched=True, actual_index=0)]


def test_no_turn_searches_every_turn():
    actual = [(0, "search", {}, None), (3, "weather", {"city": "Oslo"}, None)]
    assert match_expected_calls([weather()], actual) == [CallMatch(matched=True, actual_index=1)]


def test_the_first_passing_call_is_taken():
    actual = [
        (0, "weather", {"city": "Bergen"}, None),
        (0, "weather", {"city": "Oslo"}, None),
        (0, "weather", {"city": "Oslo"}, None),
    ]
    assert match_expected_calls([weather()], actual) == [CallMatch(matched=True, actual_index=1)]


def test_each_actual_call_matches_at_most_once():
    actual = [(0, "weather", {"city": "Oslo"}, None)]
    assert match_expected_calls([weather(), weather()], actual) == [
        CallMatch(matched=True, actual_index=0),
        CallMatch(matched=False, reason="every call to weather already matched an earlier expected call"),
    ]


def test_two_expected_calls_take_two_actual_calls():
    actual = [(0, "weather", {"city": "Oslo"}, None), (1, "weather", {"city": "Oslo"}, None)]
    matches = match_expected_calls([weather(), weather()], actual)
    assert [match.actual_index for match in matches] == [0, 1]


def test_expected_calls_are_matched_in_their_order():
    # Greedy: the loose first expected call takes call 0, which the strict second one needed.
    loose = {"tool": "f"}
    strict = {"tool": "f", "parameters": [{"name": "x", "value": 1}]}
    actual = [(0, "f", {"x": 1}, None), (0, "f", {"x": 2}, None)]
    matches = match_expected_calls([loose, strict], actual)
    assert matches == [
        CallMatch(matched=True, actual_index=0),
        CallMatch(matched=False, reason="f called with x=2, expected 1"),
    ]


def test_several_failing_calls_report_the_first():
    actual = [(0, "weather", {"city": "Bergen"}, None), (0, "weather", {}, None)]
    match = match_expected_calls([weather(turn=0)], actual)[0]
    assert match.reason == (
        "none of the 2 calls to weather in turn 0 matched; "
        "the first: weather called with city='Bergen', expected 'Oslo'"
    )


def test_long_values_are_cut_in_reasons():
    match = match_expected_calls([weather()], [(0, "weather", {"city": "x" * 200}, None)])[0]
    assert match.reason.startswith("weather called with city='xxx")
    assert match.reason.endswith("…, expected 'Oslo'")
    assert len(match.reason) < 130


# --- outputs ---------------------------------------------------------------------------


def test_an_expected_output_value():
    expected = [{"tool": "add", "output": {"value": 8}}]
    assert match_expected_calls(expected, [(0, "add", {}, 8)])[0].matched
    assert match_expected_calls(expected, [(0, "add", {}, 8.0)])[0].matched
    assert match_expected_calls(expected, [(0, "add", {}, "8")]) == [
        CallMatch(matched=False, reason="add returned '8', expected 8"),
    ]


def test_an_expected_output_against_no_recorded_output():
    assert not match_expected_calls([{"tool": "add", "output": {"value": 8}}], [(0, "add", {}, None)])[0].matched
    assert match_expected_calls([{"tool": "add", "output": {"value": None}}], [(0, "add", {}, None)])[0].matched


def test_no_expected_output_ignores_the_output():
    assert match_expected_calls([{"tool": "add", "output": None}], [(0, "add", {}, "anything")])[0].matched


# --- checks ----------------------------------------------------------------------------


class Recorder:
    """A check function that says yes to the values it is given and records every call."""

    def __init__(self, *accepted):
        self.accepted = accepted
        self.calls = []

    def __call__(self, check_text, value):
        self.calls.append((check_text, value))
        return value in self.accepted


def test_a_check_decides_the_parameter():
    expected = [{"tool": "weather", "parameters": [{"name": "city", "check": "a Norwegian city"}]}]
    check = Recorder("Bergen")
    assert match_expected_calls(expected, [(0, "weather", {"city": "Bergen"}, None)], check) == [
        CallMatch(matched=True, actual_index=0),
    ]
    assert check.calls == [("a Norwegian city", "Bergen")]


def test_a_failing_check_says_so():
    expected = [{"tool": "weather", "parameters": [{"name": "city", "check": "a Norwegian city"}]}]
    match = match_expected_calls(expected, [(0, "weather", {"city": "Paris"}, None)], Recorder())[0]
    assert match.reason == "weather called with city='Paris', which fails the check 'a Norwegian city'"


def test_a_check_on_the_output():
    expected = [{"tool": "weather", "output": {"check": "a temperature"}}]
    check = Recorder("21 °C")
    assert match_expected_calls(expected, [(0, "weather", {}, "21 °C")], check)[0].matched
    match = match_expected_calls(expected, [(0, "weather", {}, "sunny")], check)[0]
    assert match.reason == "weather returned 'sunny', which fails the check 'a temperature'"


def test_a_check_is_only_asked_when_the_items_before_it_pass():
    expected = [{"tool": "f", "parameters": [{"name": "a", "value": 1}, {"name": "b", "check": "positive"}]}]
    check = Recorder(2)
    actual = [(0, "f", {"a": 0, "b": 2}, None), (0, "f", {"a": 1}, None), (0, "f", {"a": 1, "b": 2}, None)]
    assert match_expected_calls(expected, actual, check) == [CallMatch(matched=True, actual_index=2)]
    assert check.calls == [("positive", 2)]


def test_a_check_without_a_check_function_is_an_error():
    expected = [weather(), {"tool": "search", "parameters": [{"name": "q", "check": "about Oslo"}]}]
    with pytest.raises(ValueError, match=r"expected call 1 \(search\), parameter 'q', has a check"):
        match_expected_calls(expected, [(0, "weather", {"city": "Oslo"}, None)])
    # Also when no call could reach the check.
    with pytest.raises(ValueError, match="no check function"):
        match_expected_calls(expected, [])


def test_an_output_check_without_a_check_function_is_an_error():
    with pytest.raises(ValueError, match=r"expected call 0 \(add\), output, has a check"):
        match_expected_calls([{"tool": "add", "output": {"check": "a number"}}], [])


# --- input forms -----------------------------------------------------------------------


def test_dataclasses_and_mappings_match_alike():
    as_dataclass = ExpectedCall(
        tool="weather",
        turn=0,
        parameters=(ExpectedParameter(name="city", value="Oslo"),),
        output=ExpectedOutput(value={"temp": 21}),
    )
    as_mapping = {
        "tool": "weather",
        "turn": 0,
        "parameters": [{"name": "city", "value": "Oslo"}],
        "output": {"value": {"temp": 21}},
    }
    actual = [ActualCall(turn=0, name="weather", arguments={"city": "Oslo"}, output={"temp": 21})]
    tuples = [(0, "weather", {"city": "Oslo"}, {"temp": 21})]
    for expected in (as_dataclass, as_mapping):
        for calls in (actual, tuples):
            assert match_expected_calls([expected], calls) == [CallMatch(matched=True, actual_index=0)]


def test_an_expected_call_accepts_mapping_items():
    call = ExpectedCall(tool="f", parameters=[{"name": "x", "value": None}], output={"check": "ok"})
    assert call.parameters == (ExpectedParameter(name="x", value=None),)
    assert call.output == ExpectedOutput(check="ok")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"tool": "f", "parameters": [{"name": "x", "value": 1, "check": "one"}]}, "both a value and a check"),
        ({"tool": "f", "parameters": [{"name": "x"}]}, "neither a value nor a check"),
        ({"tool": "f", "output": {"value": 1, "check": "one"}}, "both a value and a check"),
        ({"tool": "f", "output": {}}, "neither a value nor a check"),
        ({"tool": "f", "parameters": [{"name": "x", "check": " "}]}, "non-empty"),
        ({"tool": "f", "parameters": [{"value": 1}]}, "with a name"),
        ({"tool": "f", "parameters": {"x": 1}}, "parameters must be a list"),
        ({"tool": "f", "parameters": [{"name": "x", "value": 1, "type": "int"}]}, "unknown parameter field"),
        ({"tool": "f", "args": {}}, "unknown field"),
        ({"tool": " "}, "non-empty string"),
        ({"tool": "f", "turn": -1}, "turn"),
        ({"tool": "f", "turn": True}, "turn"),
        ({"parameters": []}, "with a tool"),
    ],
)
def test_malformed_expected_calls_are_errors(item, message):
    with pytest.raises(ValueError, match=message) as error:
        match_expected_calls([item], [])
    assert str(error.value).startswith("expected call 0")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ((0, "f", {}), "tuple"),
        ((-1, "f", {}, None), "turn"),
        ((0, 7, {}, None), "name"),
        ((0, "f", '{"x": 1}', None), "arguments must be a mapping"),
    ],
)
def test_malformed_actual_calls_are_errors(item, message):
    with pytest.raises(ValueError, match=message) as error:
        match_expected_calls([], [item])
    assert str(error.value).startswith("actual call 0")


# --- tool_call_accuracy ----------------------------------------------------------------


def test_accuracy_is_matched_over_expected():
    actual = [(0, "weather", {"city": "Oslo"}, None)]
    matches = match_expected_calls([weather(), weather("Bergen"), {"tool": "search"}], actual)
    assert [match.matched for match in matches] == [True, False, False]
    assert tool_call_accuracy(matches) == 1 / 3


def test_accuracy_of_booleans():
    assert tool_call_accuracy([True, False, True, True]) == 3 / 4
    assert tool_call_accuracy([True]) == 1.0
    assert tool_call_accuracy([False]) == 0.0


def test_accuracy_without_expected_calls_is_an_error():
    with pytest.raises(ValueError, match="no expected calls"):
        tool_call_accuracy([])
