"""Tool utilization without a judge: the values of tool results, found in the answer."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from spanscore.processors.ground_truth.result_values import (
    FAILURE_CHARS,
    MAX_TEXT_CHARS,
    MAX_VALUES,
    Number,
    Phrase,
    Searchable,
    ToolOutcome,
    Utilization,
    Word,
    answer_utilization,
    known_text,
    normalize,
    reaction,
    reports_failure,
    result_values,
    stem,
)


def number(text: str, shown: str | None = None) -> Number:
    return Number(Decimal(text), shown if shown is not None else text)


def phrase(text: str, shown: str | None = None) -> Phrase:
    return Phrase(text, shown if shown is not None else text)


def word(shown: str) -> Word:
    return Word(stem(normalize(shown)), shown)


# Values of a result


def test_json_leaves_are_the_values_not_keys_booleans_or_null():
    assert result_values('{"temp_c": 21, "sky": "sunny", "raining": false, "alert": null}') == [
        number("21"),
        word("sunny"),
    ]


def test_nested_objects_and_lists_give_their_leaves_in_order_each_once():
    result = '{"days": [{"high": 21.5, "sky": "Sunny"}, {"high": 19, "sky": "sunny"}], "city": {"name": "Lyon"}}'
    assert result_values(result) == [number("21.5"), word("Sunny"), number("19"), word("Lyon")]


def test_empty_and_valueless_results_have_no_values():
    for result in (None, "", "   ", "{}", "[]", "null", "true", '{"ok": true}', '{"note": ""}', "NaN", "[Infinity]"):
        assert result_values(result) == [], result


def test_a_json_string_is_its_text():
    assert result_values('"sunny"') == [word("sunny")]
    assert result_values('"AF-123"') == [phrase("af-123", "AF-123")]  # more than letters: a code
    assert result_values('["ok", "text", "C"]') == []  # short lowercase, generic, one letter
    assert result_values("21") == [number("21")]


def test_text_gives_itself_its_numbers_codes_and_words_in_any_case():
    # Generic words ("Found", "to", "at", "is") are no values; "Cheapest", starting a
    # sentence, is one; "flights" is one in lowercase.
    assert result_values("Found 3 flights: AF123 to Paris at 10:45. Cheapest is $120.") == [
        phrase(
            "found 3 flights: af123 to paris at 10:45. cheapest is $120.",
            "Found 3 flights: AF123 to Paris at 10:45. Cheapest is $120.",
        ),
        number("3.0", "3"),
        word("flights"),
        phrase("af123", "AF123"),
        word("Paris"),
        phrase("10:45"),
        word("Cheapest"),
        number("120.0", "$120"),
    ]


def test_short_words_count_only_with_a_capital_and_generic_words_never():
    text = "Heavy snow in NYC, ice on the road; see the page"
    assert result_values(text) == [
        phrase(normalize(text), text),
        word("Heavy"),
        word("snow"),
        word("NYC"),
        word("road"),
    ]
    assert result_values("The search found no results on this page.") == [
        phrase("the search found no results on this page.", "The search found no results on this page.")
    ]
    assert result_values("It finds links, shows pages.") == [  # any form of a generic word
        phrase("it finds links, shows pages.", "It finds links, shows pages.")
    ]


def test_identifiers_are_codes():
    text = "NameError: name 'perform_web_search' is not defined"
    assert result_values(text) == [
        phrase(normalize(text), text),
        word("NameError"),
        word("name"),
        phrase("perform_web_search"),
        word("defined"),
    ]


def test_a_capitalized_word_starting_a_line_is_a_word_too():
    assert result_values("Oslo:\nSnowing, -3 C") == [
        phrase("oslo: snowing, -3 c", "Oslo:\nSnowing, -3 C"),
        word("Oslo"),
        word("Snowing"),
        number("-3.0", "-3"),  # "C": one letter, no value
    ]


def test_a_json_string_of_several_words_is_read_as_text():
    assert result_values('{"summary": "Light rain in New York, 17 C"}') == [
        phrase("light rain in new york, 17 c", "Light rain in New York, 17 C"),
        word("Light"),
        word("rain"),
        word("New"),
        word("York"),
        number("17.0", "17"),
    ]


def test_json_text_inside_a_json_string_is_read_as_json():
    # The shape of an MCP tool result: content parts whose text is the tool's own JSON.
    result = '{"content": [{"type": "text", "text": "{\\"temp_c\\": 21.37}"}]}'
    assert result_values(result) == [number("21.37")]  # "text" is a generic word


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


def test_the_reason_shows_a_text_found_without_its_words():
    found = answer_utilization("17 °C, light rain.", outcomes('{"temp_c": 17, "sky": "light rain"}'))
    assert found.found == ("17", "light rain", "light", "rain")
    assert found.reason == "values found: 17, light rain"


def test_results_of_any_depth_and_size_are_read_without_failing():
    deep = "[" * 100_000 + "]" * 100_000  # beyond json's recursion limit: read as text
    assert result_values(deep) == [phrase(deep[:MAX_TEXT_CHARS])]
    nested = '{"a": ' * 900 + "21" + "}" * 900  # within json's limit, walked without recursion
    assert result_values(nested) == [number("21")]
    many = json.dumps(list(range(5000)))
    values = result_values(many)
    assert len(values) == MAX_VALUES and values[-1] == number(str(MAX_VALUES - 1))
    long_text = "rain " * 200_000  # a megabyte: one phrase and one word per result
    found = answer_utilization("Expect snow in Oslo.", outcomes(long_text, json.dumps({"log": long_text})))
    assert (found.score, found.looked_for) == (0.0, 4)
    assert answer_utilization("Expect rain in Oslo.", outcomes(long_text)).found == ("rain",)


# Words in any case, their forms, and what the agent already had


def test_an_answer_in_the_results_words_uses_it_whatever_their_case_and_place():
    # The first value rule found only capitalized words not starting a sentence: these
    # answers used their results and scored 0.
    known = known_text("What is the weather in Oslo?", {"city": "Oslo"})
    found = answer_utilization("Heavy snow in Oslo today.", outcomes("Heavy snow, -4C", known=known))
    assert found == Utilization(score=1.0, found=("Heavy", "snow"), looked_for=4, calls=1)
    # looked for: the whole text, "Heavy", "snow" and -4; "Oslo" was asked about
    assert found.reason == "values found: Heavy, snow"
    known = known_text("Will it storm in Lyon tonight?", {"city": "Lyon"})
    found = answer_utilization("Expect a thunderstorm tonight.", outcomes("Thunderstorms", known=known))
    assert found == Utilization(score=1.0, found=("Thunderstorms",), looked_for=2, calls=1)


@pytest.mark.parametrize(
    ("forms", "same"),
    [
        (("thunderstorm", "thunderstorms", "Thunderstorms"), True),
        (("storm", "storms", "stormy", "Stormy"), True),
        (("city", "cities", "city's"), True),
        (("snow", "snowy", "snowing", "snowed"), True),
        (("stop", "stopped", "stopping"), True),
        (("box", "boxes"), True),
        (("class", "classes"), True),
        (("fell", "fall"), False),  # no irregular forms
        (("rain", "train"), False),
        (("storm", "thunderstorm"), False),  # no compounds
    ],
)
def test_the_forms_of_a_word_share_its_stem(forms, same):
    stems = {stem(normalize(form)) for form in forms}
    assert (len(stems) == 1) is same, stems


def test_a_word_of_the_result_is_found_in_another_form():
    assert Searchable("It will be stormy over Bergen.").holds(word("storms"))
    assert Searchable("Two cities reported it.").holds(word("City"))
    assert not Searchable("A train is late.").holds(word("rain"))


def test_words_of_the_question_and_arguments_are_no_evidence():
    known = known_text("Is there heavy snow in Oslo?", {"city": "Oslo"})
    found = answer_utilization("Yes, heavy snow in Oslo.", outcomes("Heavy snow in Oslo", known=known))
    # the whole text, "Heavy", "snow" and "Oslo" were all in the question
    assert found == Utilization(score=1.0, found=(), looked_for=0, calls=1)
    found = answer_utilization("Yes, heavy snow.", outcomes("Heavy snow, drifting", known=known))
    assert (found.score, found.found, found.looked_for) == (0.0, (), 2)  # "drifting" and the whole text


def test_a_result_of_generic_words_only_is_looked_for_as_a_whole():
    result = "The search found no results on this page"
    found = answer_utilization("Nothing yet.", outcomes(result))
    assert found == Utilization(score=0.0, found=(), looked_for=1, calls=1)
    found = answer_utilization(f"Sorry: {result.lower()}.", outcomes(result))
    assert (found.score, found.found) == (1.0, (result,))


def test_a_number_the_agent_had_only_roughly_is_new():
    # Knowing x0 = -5 is not knowing the -4.9375 the code computed from it.
    known = known_text("Start Newton's method at x0 = -5.", "x = -5")
    result = "Iteration 1: x = -4.9375000000"
    found = answer_utilization("After one step x is \u20134.9375.", outcomes(result, known=known))  # an en dash
    assert found.found == ("-4.9375000000",)
    assert answer_utilization("x is -4.9375", outcomes("-4.9375", known="x is about -4.9375")).score == 1.0
    assert answer_utilization("x is -4.9375", outcomes("-4.9375", known="x = -4.9375")).looked_for == 0


def test_an_en_dash_before_a_number_is_a_minus():
    assert Searchable("It is \u20133 \u00b0C").holds(number("-3"))
    assert Searchable("2000\u20132009").holds(number("2009"))
    assert not Searchable("2000\u20132009").holds(number("-2009"))  # glued to a number: a range


# Results that failed or came back empty, and answers that react to them


@pytest.mark.parametrize(
    "result",
    [
        "exitcode: 0 (execution succeeded)\nCode output: False\n",
        "exitcode: 0 (execution succeeded)\nCode output: \n",
        "None",
        "[]",
        "null",
        '{"error": "timeout after 30 s"}',
        '{"items": [], "message": "No flights found for that day"}',
        "exitcode: 0 (execution succeeded)\nCode output: Population data not found.\n",
        "The search string 'Recommendation' was not found on this page.",
        "exitcode: 1 (execution failed)\nCode output: Traceback (most recent call last): ...",
        "There is no code from the last 1 message for me to execute.",
    ],
)
def test_a_result_that_failed_or_came_back_empty_reports_it(result):
    assert reports_failure(result)


@pytest.mark.parametrize(
    "result",
    [
        None,  # no result recorded is not a failure
        "0",
        '{"temp_c": 21, "error": null, "warnings": []}',  # an empty error field is no error
        "exitcode: 0 (execution succeeded)\nCode output: 12\n",
        "Light rain, 17°C",
        "Weather: " + "sunny " * FAILURE_CHARS + "no errors",  # said late, not up front
    ],
)
def test_a_result_with_something_in_it_reports_no_failure(result):
    assert not reports_failure(result)


def test_an_answer_that_reacts_to_a_failed_or_empty_result_uses_it():
    # Labelled `uses` by people: each reads the failure and acts on it, stating no value of it.
    known = known_text("Is there a TripAdvisor API?", "print(bool(api))")
    found = answer_utilization(
        "The response indicates that there might not be a readily available TripAdvisor API.",
        outcomes("exitcode: 0 (execution succeeded)\nCode output: False\n", known=known),
    )
    assert (found.score, found.found, found.reaction) == (1.0, (), "not be a readily available")
    assert found.reason == 'reacts to a failed or empty result: "not be a readily available"'
    known = known_text("What is the island's population?", 'print("Population data not found.")')
    found = answer_utilization(
        "It appears the script did not manage to find the population data in the infobox.",
        outcomes("exitcode: 0 (execution succeeded)\nCode output: Population data not found.\n", known=known),
    )
    assert (found.score, found.found, found.reaction) == (1.0, (), "did not")
    found = answer_utilization("The weather service failed; I will try again.", outcomes('{"error": "timeout"}'))
    assert (found.score, found.reaction) == (1.0, "failed")


def test_a_failed_result_ignored_or_a_failure_from_nowhere_is_no_use():
    # The terminal ran nothing and the answer goes on as if it had been told something.
    found = answer_utilization(
        "Let's search the web for the video and describe the bird.",
        outcomes("There is no code from the last 1 message for me to execute."),
    )
    assert (found.score, found.reaction) == (0.0, "")
    # The answer says it failed, but the result did not.
    found = answer_utilization("I could not get the weather.", outcomes('{"temp_c": 21, "sky": "sunny"}'))
    assert (found.score, found.reaction) == (0.0, "")
    assert reaction("I could not get the weather.") == "could not"
    assert reaction("It is sunny and 21°C.") == ""
