"""fair-forge's deterministic tool aspects: selection, parameters, sequence, and the weighted overall."""

from __future__ import annotations

import doctest
import math

import pytest

from spanscore.processors.metrics import (
    DEFAULT_TOOL_WEIGHTS,
    tool_parameters,
    tool_selection,
    tool_sequence,
    tool_usage_overall,
)
from spanscore.processors.metrics import tool_usage as tool_usage_module
from spanscore.processors.metrics.tool_usage import TOOL_ASPECTS


def test_docstring_examples():
    assert doctest.testmod(tool_usage_module).failed == 0


def test_default_weights_are_a_quarter_each():
    assert DEFAULT_TOOL_WEIGHTS == (0.25, 0.25, 0.25, 0.25)
    assert TOOL_ASPECTS == ("selection", "parameters", "sequence", "utilization")


# --- tool_selection --------------------------------------------------------------------


def test_selection_same_sets():
    assert tool_selection(["search", "fetch"], ["fetch", "search"]) == 1.0


def test_selection_duplicates_do_not_count():
    assert tool_selection(["search", "search", "fetch"], ["search", "fetch"]) == 1.0


def test_selection_used_a_subset_missing_tools():
    # U = {search} ⊂ E = {search, fetch} -> |U|/|E| = 1/2
    assert tool_selection(["search"], ["search", "fetch"]) == 1 / 2


def test_selection_used_a_superset_extra_tools():
    # E = {search} ⊂ U = {search, fetch, sum} -> |E|/|U| = 1/3
    assert tool_selection(["search", "fetch", "sum"], ["search"]) == 1 / 3


def test_selection_partial_overlap_is_jaccard():
    # U = {a, b}, E = {b, c}: |U ∩ E| / |U ∪ E| = 1/3
    assert tool_selection(["a", "b"], ["b", "c"]) == 1 / 3


def test_selection_disjoint_is_zero():
    assert tool_selection(["a"], ["b"]) == 0.0


def test_selection_nothing_expected_but_tools_used_is_zero():
    assert tool_selection(["search"], []) == 0.0


def test_selection_tools_expected_but_none_used_is_zero():
    assert tool_selection([], ["search"]) == 0.0


def test_selection_nothing_expected_and_nothing_used_is_one():
    assert tool_selection([], []) == 1.0


def test_selection_names_are_exact():
    assert tool_selection(["Search"], ["search"]) == 0.0


# --- tool_parameters -------------------------------------------------------------------


def test_parameters_equal_dicts():
    assert (
        tool_parameters([("weather", {"city": "Oslo", "days": 3})], [("weather", {"days": 3, "city": "Oslo"})]) == 1.0
    )


def test_parameters_partial_key_overlap():
    # union {city, days, unit}; equal: city -> 1/3
    used = [("weather", {"city": "Oslo", "unit": "C"})]
    expected = [("weather", {"city": "Oslo", "days": 3})]
    assert tool_parameters(used, expected) == 1 / 3


def test_parameters_same_keys_some_values_differ():
    # union {city, days}; equal: city -> 1/2
    assert (
        tool_parameters([("weather", {"city": "Oslo", "days": 2})], [("weather", {"city": "Oslo", "days": 3})]) == 0.5
    )


def test_parameters_of_a_tool_never_used_score_zero():
    # search: 1; fetch never used: 0 -> mean 1/2
    used = [("search", {"q": "x"})]
    expected = [("search", {"q": "x"}), ("fetch", {"url": "u"})]
    assert tool_parameters(used, expected) == 0.5


def test_every_expected_call_of_an_unused_tool_scores_zero():
    # search: 1; fetch ×2 never used: 0, 0 -> 1/3 (fair-forge would add one 0 per name: 1/2)
    used = [("search", {})]
    expected = [("search", {}), ("fetch", {"url": "a"}), ("fetch", {"url": "b"})]
    assert tool_parameters(used, expected) == 1 / 3


def test_parameters_compare_with_the_first_used_call_of_the_name():
    # The second used call matches, but only the first counts: union {q}, unequal -> 0.
    used = [("search", {"q": "wrong"}), ("search", {"q": "right"})]
    assert tool_parameters(used, [("search", {"q": "right"})]) == 0.0


def test_every_expected_call_of_a_name_compares_with_that_first_call():
    # Both expected calls of search against used #1 {q: a}: 1 and 0 -> 1/2
    used = [("search", {"q": "a"}), ("search", {"q": "b"})]
    expected = [("search", {"q": "a"}), ("search", {"q": "b"})]
    assert tool_parameters(used, expected) == 0.5


def test_parameters_are_type_sensitive():
    # "5" != 5, True != 1; 1 == 1.0 (JSON numbers) -> 1 of 3 keys equal
    used = [("calc", {"a": "5", "b": True, "c": 1.0})]
    expected = [("calc", {"a": 5, "b": 1, "c": 1})]
    assert tool_parameters(used, expected) == 1 / 3


def test_a_missing_key_is_not_an_explicit_null():
    # union {a, b}: a equal, b missing on the used side vs null expected -> 1/2
    assert tool_parameters([("f", {"a": 1})], [("f", {"a": 1, "b": None})]) == 0.5


def test_parameters_nested_values():
    used = [("f", {"filter": {"tags": ["a", "b"]}, "n": 2})]
    expected = [("f", {"filter": {"tags": ["b", "a"]}, "n": 2})]
    assert tool_parameters(used, expected) == 0.5  # list order matters: filter differs


def test_parameters_both_empty_are_equal():
    assert tool_parameters([("now", {})], [("now", {})]) == 1.0


def test_parameters_with_nothing_expected_is_zero():
    assert tool_parameters([("search", {})], []) == 0.0
    assert tool_parameters([], []) == 0.0


# --- tool_sequence ---------------------------------------------------------------------


def test_sequence_does_not_matter_is_one():
    assert tool_sequence([("b", {}), ("a", {})], [("a", {}), ("b", {})], order_matters=False) == 1.0
    assert tool_sequence([], [], order_matters=False) == 1.0


def test_sequence_in_order_is_one():
    assert tool_sequence([("a", {}), ("b", {})], [("a", {}), ("b", {})]) == 1.0


def test_sequence_swapped_is_zero():
    # a expected at 1, used at 2; b expected at 2, used at 1
    assert tool_sequence([("b", {}), ("a", {})], [("a", {}), ("b", {})]) == 0.0


def test_sequence_with_repeated_tool_names():
    # used: search@1, search@2, fetch@3; expected: search@1, fetch@2, search@3
    # search#1: 1 == 1 -> 1; fetch#1: 2 != 3 -> 0; search#2: 3 != 2 -> 0 -> 1/3
    used = [("search", {}), ("search", {}), ("fetch", {})]
    expected = [("search", {}), ("fetch", {}), ("search", {})]
    assert tool_sequence(used, expected) == 1 / 3


def test_sequence_repeated_names_in_the_same_order():
    # used: search@1, fetch@2, search@3 = expected -> 1
    calls = [("search", {}), ("fetch", {}), ("search", {})]
    assert tool_sequence(calls, calls) == 1.0


def test_sequence_an_extra_call_shifts_later_steps():
    # used: a@1, x@2, b@3; expected a@1, b@2 -> a: 1, b: 0 -> 1/2
    assert tool_sequence([("a", {}), ("x", {}), ("b", {})], [("a", {}), ("b", {})]) == 0.5


def test_sequence_a_tool_used_fewer_times_than_expected():
    # search#2 expected at 2 has no second used call -> 0; search#1 at 1 -> 1 -> 1/2
    assert tool_sequence([("search", {})], [("search", {}), ("search", {})]) == 0.5


def test_sequence_a_tool_never_used_scores_zero():
    assert tool_sequence([("a", {})], [("a", {}), ("b", {})]) == 0.5


def test_sequence_explicit_steps():
    # fair-forge's data carries the step: a@1, b@3 expected; used a@1, x@2, b@3 -> 1
    used = [("a", {}, 1), ("x", {}, 2), ("b", {}, 3)]
    expected = [("a", {}, 1), ("b", {}, 3)]
    assert tool_sequence(used, expected) == 1.0


def test_sequence_with_nothing_expected_is_zero():
    assert tool_sequence([("a", {})], []) == 0.0


# --- tool_usage_overall ----------------------------------------------------------------


def test_overall_all_correct_is_one():
    assert tool_usage_overall(1.0, 1.0, 1.0, 1.0) == 1.0


def test_overall_weighted_sum():
    # 0.25 × (1 + 0.5 + 0 + 1) = 0.625
    assert tool_usage_overall(1.0, 0.5, 0.0, 1.0) == 0.625


def test_overall_custom_weights_are_not_renormalized():
    # 0.5 × 1 + 0.5 × 0.5 = 0.75 ...
    assert tool_usage_overall(1.0, 0.5, 1.0, 1.0, weights=(0.5, 0.5, 0.0, 0.0)) == 0.75
    # ... weights summing to 0.5 cap the overall at 0.5 ...
    assert tool_usage_overall(1.0, 1.0, 1.0, 1.0, weights=(0.25, 0.25, 0.0, 0.0)) == 0.5
    # ... and summing to 2 can take it to 2.
    assert tool_usage_overall(1.0, 1.0, 1.0, 1.0, weights=(0.5, 0.5, 0.5, 0.5)) == 2.0


def test_overall_of_the_aspects():
    used = [("search", {"q": "x"}), ("fetch", {"url": "u"})]
    expected = [("search", {"q": "x"})]
    selection = tool_selection([name for name, _ in used], [name for name, _ in expected])  # 1/2
    parameters = tool_parameters(used, expected)  # 1
    sequence = tool_sequence(used, expected)  # 1
    # 0.25 × (0.5 + 1 + 1 + 0) = 0.625
    assert tool_usage_overall(selection, parameters, sequence, 0.0) == 0.625


@pytest.mark.parametrize("bad", [-0.1, 1.1, math.nan, True, "1"])
def test_overall_aspects_must_be_in_the_unit_interval(bad):
    with pytest.raises(ValueError, match="sequence"):
        tool_usage_overall(1.0, 1.0, bad, 1.0)


@pytest.mark.parametrize("weights", [(0.25, 0.25, 0.25), (0.25,) * 5, {"selection": 1.0}, "abcd"])
def test_overall_needs_four_weights(weights):
    with pytest.raises(ValueError, match="4 numbers"):
        tool_usage_overall(1.0, 1.0, 1.0, 1.0, weights=weights)


@pytest.mark.parametrize("weight", [-0.25, math.inf, math.nan, True])
def test_overall_weights_must_be_finite_and_non_negative(weight):
    with pytest.raises(ValueError, match="'utilization'"):
        tool_usage_overall(1.0, 1.0, 1.0, 1.0, weights=(0.25, 0.25, 0.25, weight))


# --- malformed calls -------------------------------------------------------------------


@pytest.mark.parametrize("call", [("search",), "search", ("search", "q=x"), (1, {}), ("search", {}, 0), ("a", {}, 1.0)])
def test_malformed_calls_are_errors(call):
    for function in (tool_parameters, tool_sequence):
        with pytest.raises(ValueError, match=r"expected_calls\[0\]"):
            function([], [call])
        with pytest.raises(ValueError, match=r"used_calls\[0\]"):
            function([call], [])
