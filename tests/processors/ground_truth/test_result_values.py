"""Tool utilization without a judge: the values of tool results, found in the answer."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from spanscore.processors.ground_truth.result_values import (
    MAX_TEXT_CHARS,
    MAX_VALUES,
    Number,
    Phrase,
    Searchable,
    ToolOutcome,
    Utilization,
    answer_utilization,
    known_text,
    normalize,
    result_values,
)


def number(text: str, shown: str | None = None) -> Number:
    return Number(Decimal(text), shown if shown is not None else text)


def phrase(text: str, shown: str | None = None) -> Phrase:
    return Phrase(text, shown if shown is not None else text)


# Values of a result


def test_json_leaves_are_the_values_not_keys_booleans_or_null():
    assert result_values('{"temp_c": 21, "sky": "sunny", "raining": false, "alert": null}') == [
        number("21"),
        phrase("sunny"),
    ]


def test_nested_objects_and_lists_give_their_leaves_in_order_each_once():
    result = '{"days": [{"high": 21.5, "sky": "Sunny"}, {"high": 19, "sky": "sunny"}], "city": {"name": "Lyon"}}'
    assert result_values(result) == [number("21.5"), phrase("sunny", "Sunny"), number("19"), phrase("lyon", "Lyon")]


def test_empty_and_valueless_results_have_no_values():
    for result in (None, "", "   ", "{}", "[]", "null", "true", '{"ok": true}', '{"note": ""}', "NaN", "[Infinity]"):
        assert result_values(result) == [], result


def test_a_json_string_is_its_text():
    assert result_values('"sunny"') == [phrase("sunny")]
    assert result_values("21") == [number("21")]


def test_text_gives_itself_its_numbers_codes_and_names_not_its_lowercase_words():
    # "Found" and "Cheapest" start sentences; "flights", "to", "at", "is" are lowercase.
    assert result_values("Found 3 flights: AF123 to Paris at 10:45. Cheapest is $120.") == [
        phrase(
            "found 3 flights: af123 to paris at 10:45. cheapest is $120.",
            "Found 3 flights: AF123 to Paris at 10:45. Cheapest is $120.",
        ),
        number("3.0", "3"),
        phrase("af123", "AF123"),
        phrase("paris", "Paris"),
        phrase("10:45"),
        number("120.0", "$120"),
    ]


def test_a_capitalized_word_starting_a_line_is_no_name():
    assert result_values("Oslo:\nSnowing, -3 C") == [
        phrase("oslo: snowing, -3 c", "Oslo:\nSnowing, -3 C"),
        number("-3.0", "-3"),
        phrase("c", "C"),  # found nowhere: one letter is not informative (below)
    ]


def test_a_json_string_of_several_words_is_read_as_text():
    assert result_values('{"summary": "Light rain in New York, 17 C"}') == [
        phrase("light rain in new york, 17 c", "Light rain in New York, 17 C"),
        phrase("new", "New"),
        phrase("york", "York"),
        number("17.0", "17"),
        phrase("c", "C"),
    ]


def test_json_text_inside_a_json_string_is_read_as_json():
    # The shape of an MCP tool result: content parts whose text is the tool's own JSON.
    result = '{"content": [{"type": "text", "text": "{\\"temp_c\\": 21.37}"}]}'
    assert result_values(result) == [phrase("text"), number("21.37")]


def test_a_word_that_is_a_number_with_a_unit_or_a_currency_is_that_number():
    assert result_values('["21°C", "$3.50", "1,000", "-4", "21,5"]') == [
        number("21.0", "21°C"),
        number("3.50", "$3.50"),
        number("1000.0", "1,000"),
        number("-4.0", "-4"),
        phrase("21,5"),  # a decimal comma is not read as one
    ]


# Normalizing and finding


def test_normalizing_drops_accents_and_compatibility_forms_and_casefolds():
    assert normalize("  São\u00a0PAULO  Zürich ２１℃ −3 Straße ") == "sao paulo zurich 21°c -3 strasse"


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ("It is 21°C.", True),
        ("It is 21 °C.", True),
        ("It is 21C.", True),
        ("It is 21.0 degrees.", True),
        ("(21)", True),
        ("It is 210 degrees.", False),
        ("It is 2.1 degrees.", False),
        ("In 2021.", False),
        ("It is 1.21 degrees.", False),
        ("Take the A21.", False),
        ("It is 21.4 degrees.", False),  # read at one decimal: 21.4 is not 21
        ("It is -21 degrees.", False),
        ("It is ２１ degrees.", True),
    ],
)
def test_a_number_is_found_as_a_number(answer, found):
    assert Searchable(answer).holds(number("21")) is found


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ("About 21 degrees.", True),  # |21.37 - 21| <= 0.5
        ("It is 21.4.", True),  # <= 0.05
        ("It is 21.37.", True),
        ("It is 21.3.", False),  # 0.07 > 0.05
        ("It is 22.", False),
    ],
)
def test_a_number_is_found_rounded_at_the_answers_precision(answer, found):
    assert Searchable(answer).holds(number("21.37")) is found


def test_signs_and_thousands():
    assert Searchable("It is -3 °C").holds(number("-3"))
    assert Searchable("It is \u22123 °C").holds(number("-3"))  # the minus sign
    assert not Searchable("It is 3 °C").holds(number("-3"))
    assert not Searchable("On 2024-3-1").holds(number("-3"))  # a hyphen glued to a number is no sign
    assert Searchable("1,000 people").holds(number("1000"))
    assert Searchable("at 1,000.5 m").holds(number("1000.5"))


def test_strings_are_found_on_word_boundaries_whatever_the_case_accents_and_spacing():
    answer = Searchable("Lyon has LIGHT\n  rain; São Paulo is dry, rainy later.")
    assert answer.holds(phrase("light rain"))
    assert answer.holds(phrase("sao paulo"))
    assert answer.holds(Phrase(normalize("São Paulo"), "São Paulo"))
    assert not answer.holds(phrase("rai"))
    assert not Searchable("It is rainy.").holds(phrase("rain"))
    assert Searchable("Result: 10:45.").holds(phrase("10:45"))


# Utilization


def outcomes(*results: str | None, known: str = "") -> list[ToolOutcome]:
    return [ToolOutcome(result, known) for result in results]


def test_one_value_found_is_enough():
    found = answer_utilization("It is 21°C in Paris.", outcomes('{"temp_c": 21, "sky": "sunny", "humidity": 40}'))
    assert found == Utilization(score=1.0, found=("21",), looked_for=3, calls=1)
    assert found.reason == "values found: 21"


def test_an_answer_without_the_values_does_not_use_the_results():
    found = answer_utilization("I can't check the weather right now.", outcomes('{"temp_c": 21, "sky": "sunny"}'))
    assert found == Utilization(score=0.0, found=(), looked_for=2, calls=1)
    assert found.reason == "none of the 2 values of the tool results found in the answer"


def test_the_raw_result_text_is_not_what_is_looked_for():
    # The answer pastes nothing of the JSON, and states its values.
    assert answer_utilization("Sunny, twenty-one... 21 degrees", outcomes('{"temp_c": 21}')).score == 1.0
    assert answer_utilization('{"temp_c": 12}', outcomes('{"temp_c": 21}')).score == 0.0


def test_values_the_agent_had_before_the_call_are_not_evidence():
    known = known_text("What's the weather in Paris?", {"city": "Paris", "days": 3})
    result = '{"city": "Paris", "days": 3, "temp_c": 21}'
    found = answer_utilization("I can't check the weather in Paris for the next 3 days.", outcomes(result, known=known))
    assert found == Utilization(score=0.0, found=(), looked_for=1, calls=1)  # only 21 was looked for
    assert known_text("Hi", '{"q": "x"}') == 'Hi\n{"q": "x"}'
    assert known_text("Hi", None) == "Hi\n"


def test_some_result_suffices_among_several():
    found = answer_utilization("Lyon: 17°C.", outcomes('{"id": "f-93ac"}', '{"temp_c": 17}', known=""))
    assert (found.score, found.found, found.looked_for) == (1.0, ("17",), 2)


def test_results_with_nothing_to_look_for_leave_nothing_to_ignore():
    for results in ([None], [""], ['{"ok": true}'], ["C"], [None, "null"]):
        found = answer_utilization("Done.", outcomes(*results))
        assert found == Utilization(score=1.0, found=(), looked_for=0, calls=len(results)), results
        assert found.reason == "no values in the tool results to look for"


def test_no_tool_calls_use_no_tool_result():
    found = answer_utilization("It is 21°C.", [])
    assert found == Utilization(score=0.0, found=(), looked_for=0, calls=0)
    assert found.reason == "no tool calls"


def test_an_empty_answer_uses_nothing():
    assert answer_utilization("", outcomes('{"temp_c": 21}')).score == 0.0


def test_the_reason_shows_at_most_three_values():
    found = answer_utilization("a b c d: 1 2 3 4", outcomes("[1, 2, 3, 4]"))
    assert found.reason == "values found: 1, 2, 3, ..."


def test_results_of_any_depth_and_size_are_read_without_failing():
    deep = "[" * 100_000 + "]" * 100_000  # beyond json's recursion limit: read as text
    assert result_values(deep) == [phrase(deep[:MAX_TEXT_CHARS])]
    nested = '{"a": ' * 900 + "21" + "}" * 900  # within json's limit, walked without recursion
    assert result_values(nested) == [number("21")]
    many = json.dumps(list(range(5000)))
    values = result_values(many)
    assert len(values) == MAX_VALUES and values[-1] == number(str(MAX_VALUES - 1))
    long_text = "rain " * 200_000  # a megabyte: one phrase per result, lowercase words being no values
    found = answer_utilization("Expect rain in Oslo.", outcomes(long_text, json.dumps({"log": long_text})))
    assert (found.score, found.looked_for) == (0.0, 2)
