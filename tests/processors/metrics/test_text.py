"""Word sets and Jaccard similarity, the lexical half of loop detection."""

from __future__ import annotations

import doctest

import pytest

from spanscore.processors.metrics import text
from spanscore.processors.metrics.text import STOP_WORDS, jaccard, text_jaccard, word_set


def test_stop_words_are_exactly_the_documented_list():
    documented = (
        "a an the is are was were be been being have has had do does did will would shall should "
        "may might can could of in to for on with at by from as into through during before after "
        "above below and but or nor not so yet both either neither each every all any few more most "
        "other some such no only own same than too very it its"
    ).split()
    assert STOP_WORDS == frozenset(documented)
    assert len(documented) == len(STOP_WORDS) == 70  # no duplicates


def test_stop_words_are_dropped_and_case_folded():
    assert word_set("The Weather IS nice and the weather was NICE") == {"weather", "nice"}


def test_one_character_tokens_are_dropped():
    # "I", "x", "7" are single characters; "42" and "ok" have two.
    assert word_set("I saw x = 7 and 42 ok") == {"saw", "42", "ok"}


def test_punctuation_splits_words():
    # "don't" -> "don" + "t" (dropped); "e-mail" -> "e" (dropped) + "mail"; "api.call()" -> "api", "call".
    assert word_set("don't e-mail api.call()!") == {"don", "mail", "api", "call"}


def test_underscore_and_digits_are_word_characters():
    assert word_set("get_weather v2 2024-06-01") == {"get_weather", "v2", "2024", "06", "01"}


def test_unicode_words_are_kept_whole_and_lowercased():
    # \w matches accented and non-Latin letters; str.lower folds "É" to "é".
    assert word_set("ÉTÉ Café naïve Straße 東京 ñ") == {"été", "café", "naïve", "straße", "東京"}


def test_text_of_only_stop_words_and_punctuation_has_no_words():
    assert word_set("It is what it is... or not!") == {"what"}
    assert word_set("it is, or is not?") == frozenset()
    assert word_set("") == frozenset()


def test_jaccard_of_identical_sets_is_one():
    assert jaccard({"weather", "tokyo"}, {"tokyo", "weather"}) == 1.0


def test_jaccard_of_disjoint_sets_is_zero():
    assert jaccard({"weather"}, {"flights"}) == 0.0


def test_jaccard_of_overlapping_sets():
    # {a1, b1, c1} ∩ {b1, c1, d1} = 2 words, ∪ = 4 words -> 2/4 = 0.5
    assert jaccard({"a1", "b1", "c1"}, {"b1", "c1", "d1"}) == 0.5
    # {x1} ⊂ {x1, y1, z1}: 1/3
    assert jaccard({"x1"}, {"x1", "y1", "z1"}) == pytest.approx(1 / 3)


def test_jaccard_of_two_empty_sets_is_zero():
    assert jaccard(set(), set()) == 0.0
    assert jaccard(frozenset(), {"weather"}) == 0.0


def test_text_jaccard_tokenizes_both_texts():
    # {check, weather, tokyo} vs {check, weather, osaka}: 2 shared of 4 -> 0.5
    assert text_jaccard("Check the weather in Tokyo.", "check weather, Osaka") == 0.5
    # Both texts are only stop words: two empty sets -> 0, not 1.
    assert text_jaccard("it is", "it is") == 0.0


def test_word_set_is_a_frozenset():
    assert isinstance(word_set("weather report"), frozenset)


def test_docstring_examples_hold():
    assert doctest.testmod(text).failed == 0


def test_sentences_end_at_stops_before_a_capital_and_at_semicolons_and_lines():
    prose = (
        "Refunds take 30 days. They go to the card; cash is not refunded!\nWhy? E.g. this, e.g. that.\n\n- a list item"
    )
    assert text.sentences(prose) == [
        "Refunds take 30 days.",
        "They go to the card;",
        "cash is not refunded!",
        "Why?",
        "E.g. this, e.g. that.",
        "- a list item",
    ]


def test_sentences_leave_out_parts_without_a_letter_or_digit_and_stop_at_the_limit():
    assert text.sentences("...\n--\n  \n") == []
    assert text.sentences("") == []
    assert text.sentences("One. Two. Three. Four.", limit=2) == ["One.", "Two."]
    assert text.sentences("42.") == ["42."]
    assert text.sentences("v1.2 is out. 3.5 is not") == ["v1.2 is out.", "3.5 is not"]
