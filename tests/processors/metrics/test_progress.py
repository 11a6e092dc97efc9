"""agent_inspect's progress arithmetic: padding, AUC, PPT, final-turn success, progress per turn."""

from __future__ import annotations

import doctest
import math

import pytest

from spanscore.processors.metrics import (
    DEFAULT_MAX_TURNS,
    pad_progress,
    progress_auc,
    progress_per_turn,
    progress_through_turns,
    static_progress,
    success_final_turn,
)
from spanscore.processors.metrics import progress as progress_module


def test_docstring_examples():
    assert doctest.testmod(progress_module).failed == 0


# --- pad_progress ----------------------------------------------------------------------


def test_default_max_turns_is_twenty():
    assert DEFAULT_MAX_TURNS == 20
    assert pad_progress([0.5]) == [0.5] * 20


def test_pad_with_the_last_value_the_suites_example():
    assert pad_progress([0.5, 0.5, 1.0], max_turns=4) == [0.5, 0.5, 1.0, 1.0]


def test_truncate_past_max_turns():
    assert pad_progress([0.25, 0.5, 0.75, 1.0], max_turns=2) == [0.25, 0.5]


def test_a_list_of_exactly_max_turns_is_unchanged():
    assert pad_progress([0.0, 0.5, 1.0], max_turns=3) == [0.0, 0.5, 1.0]


def test_max_turns_one_keeps_the_first_value():
    assert pad_progress([0.5, 1.0], max_turns=1) == [0.5]


def test_pad_returns_floats_and_leaves_the_input_alone():
    given = [0, 1]
    padded = pad_progress(given, max_turns=3)
    assert padded == [0.0, 1.0, 1.0]
    assert all(type(value) is float for value in padded)
    assert given == [0, 1]


def test_an_empty_progress_list_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        pad_progress([], max_turns=4)


@pytest.mark.parametrize("max_turns", [0, -1, 2.0, True, None])
def test_max_turns_must_be_a_positive_int(max_turns):
    with pytest.raises(ValueError, match="max_turns"):
        pad_progress([0.5], max_turns=max_turns)


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, True, "0.5", None])
def test_progress_values_must_be_numbers_in_the_unit_interval(bad):
    for function in (pad_progress, progress_auc, progress_per_turn, success_final_turn):
        with pytest.raises(ValueError, match=r"progress\[1\]"):
            function([0.5, bad])


# --- progress_auc ----------------------------------------------------------------------


def test_auc_of_the_suites_example():
    # [0.5, 0.5, 1.0] with max_turns 4 -> [0.5, 0.5, 1, 1]
    # trapezoids: (0.5+0.5)/2 + (0.5+1)/2 + (1+1)/2 = 0.5 + 0.75 + 1 = 2.25; / 3 = 0.75
    assert progress_auc(pad_progress([0.5, 0.5, 1.0], max_turns=4)) == 0.75


def test_auc_of_a_single_value_is_that_value():
    assert progress_auc([0.4]) == 0.4
    assert progress_auc(pad_progress([0.7, 1.0], max_turns=1)) == 0.7


def test_auc_of_two_values_is_their_mean():
    assert progress_auc([0.0, 1.0]) == 0.5


def test_auc_of_flat_curves():
    assert progress_auc([0.0] * 20) == 0.0
    assert progress_auc([1.0] * 20) == 1.0


def test_auc_rewards_early_progress():
    # Completed at turn 2 of 20: (0 + 1)/2 + 18 × 1 = 18.5 over 19 steps.
    early = progress_auc(pad_progress([0.0, 1.0]))
    assert early == 18.5 / 19
    # Completed at the last of 20 turns: 18 × 0 + (0 + 1)/2 = 0.5 over 19 steps.
    late = progress_auc([0.0] * 19 + [1.0])
    assert late == 0.5 / 19
    assert early > late


def test_auc_of_an_empty_list_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        progress_auc([])


# --- progress_per_turn -----------------------------------------------------------------


def test_ppt_of_the_suites_example():
    # m = 1, first reached at index 2 -> 1 / (2 + 1)
    assert progress_per_turn([0.5, 0.5, 1.0, 1.0]) == 1 / 3


def test_ppt_of_all_zeros_is_zero():
    assert progress_per_turn([0.0] * 20) == 0.0


def test_ppt_takes_the_first_turn_reaching_the_maximum():
    # m = 0.25 first at index 1 -> 0.25 / 2; the padding after it does not count.
    assert progress_per_turn(pad_progress([0.0, 0.25])) == 0.125


def test_ppt_of_immediate_success_is_one():
    assert progress_per_turn(pad_progress([1.0])) == 1.0


def test_ppt_of_an_empty_list_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        progress_per_turn([])


# --- success_final_turn ----------------------------------------------------------------


def test_success_when_the_last_value_is_one():
    assert success_final_turn(pad_progress([0.5, 0.5, 1.0], max_turns=4)) == 1.0


def test_no_success_below_one():
    assert success_final_turn(pad_progress([0.5, 0.75], max_turns=4)) == 0.0


def test_success_reads_only_the_last_value():
    assert success_final_turn([1.0, 0.5]) == 0.0
    assert success_final_turn([0.0, 1.0]) == 1.0


def test_success_past_max_turns_does_not_count():
    # Completed at turn 3, but only 2 turns are evaluated.
    assert success_final_turn(pad_progress([0.0, 0.5, 1.0], max_turns=2)) == 0.0


# --- progress_through_turns ------------------------------------------------------------


def test_progress_from_verdicts_per_turn():
    # 4 subgoals: none, then #1, then #0 and #3 -> 0/4, 1/4, 3/4
    assert progress_through_turns([set(), {1}, {0, 3}], subgoal_count=4) == [0.0, 0.25, 0.75]


def test_a_completed_subgoal_stays_completed_and_counts_once():
    # #0 at turn 0, again at turn 1 (not counted twice), nothing at turn 2.
    assert progress_through_turns([{0}, {0}, set()], subgoal_count=2) == [0.5, 0.5, 0.5]


def test_progress_accepts_any_iterables_of_indices():
    assert progress_through_turns([[0], (1, 2)], subgoal_count=3) == [1 / 3, 1.0]


def test_no_turns_give_no_progress_values():
    assert progress_through_turns([], subgoal_count=3) == []


def test_progress_through_turns_feeds_the_scores():
    progress = progress_through_turns([{0}, set(), {1}], subgoal_count=2)  # [0.5, 0.5, 1.0]
    padded = pad_progress(progress, max_turns=4)
    assert padded == [0.5, 0.5, 1.0, 1.0]
    assert progress_auc(padded) == 0.75
    assert progress_per_turn(padded) == 1 / 3
    assert success_final_turn(padded) == 1.0


@pytest.mark.parametrize("count", [0, -1, 1.0, True])
def test_subgoal_count_must_be_a_positive_int(count):
    with pytest.raises(ValueError, match="subgoal_count"):
        progress_through_turns([set()], subgoal_count=count)


@pytest.mark.parametrize("index", [-1, 2, 1.0, True, "0"])
def test_subgoal_indices_must_be_in_range(index):
    with pytest.raises(ValueError, match="turn 1: subgoal index"):
        progress_through_turns([{0}, {index}], subgoal_count=2)


# --- static_progress -------------------------------------------------------------------


def test_static_progress_is_completed_over_judged():
    assert static_progress(2, 3) == 2 / 3
    assert static_progress(0, 1) == 0.0
    assert static_progress(4, 4) == 1.0


def test_static_progress_over_nothing_judged_is_an_error():
    with pytest.raises(ValueError, match="judged"):
        static_progress(0, 0)


@pytest.mark.parametrize(("completed", "judged"), [(3, 2), (-1, 2), (1.0, 2), (1, 2.0), (True, 2)])
def test_static_progress_needs_consistent_counts(completed, judged):
    with pytest.raises(ValueError):
        static_progress(completed, judged)
