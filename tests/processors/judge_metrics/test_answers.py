import math

import pytest

from spanscore.processors.judge_metrics.answers import MalformedAnswer, extract_json, parse_answer, validate

SCORE = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
    },
    "required": ["score", "verdict"],
    "additionalProperties": False,
}


def test_a_bare_json_object_is_parsed():
    assert extract_json(' {"score": 0.5, "verdict": "pass"} ') == {"score": 0.5, "verdict": "pass"}


def test_a_json_fence_is_preferred_to_other_fences_and_prose():
    text = 'Here is {an aside}.\n```python\n{"x": 1}\n```\nAnswer:\n```json\n{"score": 1, "verdict": "pass"}\n```'
    assert extract_json(text) == {"score": 1, "verdict": "pass"}


def test_the_first_balanced_object_is_found_in_prose_with_braces_in_strings():
    text = 'I think {not json} so: {"verdict": "fail", "note": "a } inside", "score": 0} done.'
    assert extract_json(text) == {"verdict": "fail", "note": "a } inside", "score": 0}


def test_thinking_blocks_are_skipped():
    text = '<think>maybe {"score": 9}?</think>\n{"score": 0.2, "verdict": "fail"}'
    assert extract_json(text) == {"score": 0.2, "verdict": "fail"}


@pytest.mark.parametrize("text", [None, "", "   ", "no json here", '{"score": 0.5, "verdict": ', "[1, 2]"])
def test_text_without_a_json_object_is_malformed(text):
    with pytest.raises(MalformedAnswer):
        extract_json(text)


def test_a_valid_answer_passes_unchanged():
    assert parse_answer('{"score": 0.25, "verdict": "pass"}', SCORE) == {"score": 0.25, "verdict": "pass"}


@pytest.mark.parametrize("value, expected", [(1.0000001, 1), (-0.0000005, 0), (1.0, 1.0), (0, 0)])
def test_numbers_within_the_tolerance_are_clamped_to_the_bound(value, expected):
    assert validate({"score": value, "verdict": "pass"}, SCORE)["score"] == expected


@pytest.mark.parametrize("value", [7.5, 1.01, -0.1, math.nan, math.inf, "0.5", True, None])
def test_numbers_out_of_range_non_finite_or_mistyped_are_malformed(value):
    with pytest.raises(MalformedAnswer, match=r"\$\.score"):
        validate({"score": value, "verdict": "pass"}, SCORE)


def test_a_missing_required_field_is_malformed():
    with pytest.raises(MalformedAnswer, match="missing required 'verdict'"):
        validate({"score": 0.5}, SCORE)


def test_a_value_outside_the_enum_is_malformed():
    with pytest.raises(MalformedAnswer, match="not one of"):
        validate({"score": 0.5, "verdict": "maybe"}, SCORE)


def test_keys_the_schema_forbids_are_dropped():
    assert validate({"score": 0.5, "verdict": "pass", "extra": "x"}, SCORE) == {"score": 0.5, "verdict": "pass"}


def test_keys_an_open_schema_allows_are_kept():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert validate({"a": 1, "b": [2]}, schema) == {"a": 1, "b": [2]}


def test_integers_written_as_floats_are_accepted_as_integers():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 5}}}
    answer = validate({"n": 3.0}, schema)
    assert answer == {"n": 3} and isinstance(answer["n"], int)
    with pytest.raises(MalformedAnswer):
        validate({"n": 3.5}, schema)


def test_arrays_are_validated_item_by_item():
    schema = {
        "type": "object",
        "required": ["claims"],
        "properties": {
            "claims": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "required": ["supported"],
                    "properties": {"supported": {"type": "boolean"}},
                },
            }
        },
    }
    assert validate({"claims": [{"supported": True}]}, schema) == {"claims": [{"supported": True}]}
    with pytest.raises(MalformedAnswer, match=r"\$\.claims\[1\]\.supported"):
        validate({"claims": [{"supported": True}, {"supported": "yes"}]}, schema)
    with pytest.raises(MalformedAnswer, match="more than 3"):
        validate({"claims": [{"supported": True}] * 4}, schema)


def test_a_list_of_types_accepts_any_of_them():
    schema = {"type": "object", "properties": {"reason": {"type": ["string", "null"]}}}
    assert validate({"reason": None}, schema) == {"reason": None}
    with pytest.raises(MalformedAnswer, match="expected string or null"):
        validate({"reason": 3}, schema)


def test_booleans_do_not_match_numeric_enums():
    schema = {"type": "object", "properties": {"grade": {"enum": [0, 1]}}}
    with pytest.raises(MalformedAnswer):
        validate({"grade": True}, schema)
