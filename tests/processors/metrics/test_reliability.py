"""Reliability arithmetic: TSR, SSR, error budget, episode success, trajectory similarity."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

from spanscore.processors.metrics import (
    episode_success,
    error_budget,
    mean_pairwise_similarity,
    step_success_rate,
    task_success_rate,
    trajectory_similarity,
)


def test_docstring_examples():
    module = importlib.import_module("spanscore.processors.metrics.reliability")
    assert doctest.testmod(module).failed == 0


# --- TSR and SSR -----------------------------------------------------------------------


def test_task_success_rate():
    # 3 of 4 episodes succeeded
    assert task_success_rate([True, False, True, True]) == 3 / 4
    assert task_success_rate([False]) == 0.0
    assert task_success_rate(iter([True, True])) == 1.0


def test_task_success_rate_takes_numpy_bools():
    assert task_success_rate(np.array([True, False])) == 1 / 2


def test_task_success_rate_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="at least one episode"):
        task_success_rate([])


@pytest.mark.parametrize("outcome", [1, 0.7, "yes", None])
def test_task_success_rate_refuses_non_bools(outcome):
    with pytest.raises(ValueError, match="must be a bool"):
        task_success_rate([True, outcome])


def test_step_success_rate_is_a_mean_of_episode_rates():
    # (2/4 + 3/3) / 2 = 0.75: per-episode rates averaged, not steps pooled (which gives 5/7)
    assert step_success_rate([[True, False, True, False], [True, True, True]]) == 0.75


def test_step_success_rate_leaves_out_episodes_without_steps():
    # [] has no rate: (1/2 + 1) / 2
    assert step_success_rate([[True, False], [], [True]]) == 0.75


@pytest.mark.parametrize("episodes", [[], [[]], [[], []]])
def test_step_success_rate_without_any_step_is_an_error(episodes):
    with pytest.raises(ValueError, match="at least one episode with steps"):
        step_success_rate(episodes)


def test_step_success_rate_refuses_non_bool_steps():
    with pytest.raises(ValueError, match="must be a bool"):
        step_success_rate([[True, 0.5]])


def test_high_ssr_with_low_tsr():
    # Each episode fails only its last of 5 steps: SSR 0.8, TSR 0.
    episodes = [[True, True, True, True, False]] * 3
    assert step_success_rate(episodes) == pytest.approx(0.8)
    assert task_success_rate(all(episode) for episode in episodes) == 0.0


# --- error budget and episode success ---------------------------------------------------


def test_error_budget_seed_example():
    # 1 - 0.9**0.1 = 1 - 0.98952... = 0.01048... ≈ 0.0105
    assert error_budget(0.9, 10) == pytest.approx(0.0105, abs=5e-5)
    assert error_budget(0.9, 10) == 1 - 0.9**0.1


def test_episode_success_seed_figure():
    # 10% per-step error over 10 steps: 0.9**10 = 0.3487, "only 35%"
    assert episode_success(0.1, 10) == pytest.approx(0.3487, abs=5e-5)


@pytest.mark.parametrize("target", [0.5, 0.9, 0.99, 1.0, 1e-6])
@pytest.mark.parametrize("steps", [1, 2, 10, 50])
def test_error_budget_round_trip(target, steps):
    assert episode_success(error_budget(target, steps), steps) == pytest.approx(target)


def test_error_budget_edges():
    assert error_budget(1.0, 10) == 0.0  # a perfect target leaves no error budget
    assert error_budget(0.8, 1) == pytest.approx(0.2)  # one step: ε = 1 - τ
    assert error_budget(0.9, 20) < error_budget(0.9, 10)  # longer episodes, tighter budget


def test_episode_success_edges():
    assert episode_success(0.0, 7) == 1.0
    assert episode_success(1.0, 7) == 0.0
    assert episode_success(0.25, 1) == 0.75


@pytest.mark.parametrize("target", [0, -0.1, 1.01, float("nan"), float("inf"), True, "0.9"])
def test_error_budget_validates_target(target):
    with pytest.raises(ValueError, match="target_tsr"):
        error_budget(target, 10)


@pytest.mark.parametrize("error", [-0.01, 1.01, float("nan"), True, None])
def test_episode_success_validates_error(error):
    with pytest.raises(ValueError, match="step_error"):
        episode_success(error, 10)


@pytest.mark.parametrize("steps", [0, -3, 2.0, True])
def test_steps_are_validated(steps):
    with pytest.raises(ValueError, match="steps"):
        error_budget(0.9, steps)
    with pytest.raises(ValueError, match="steps"):
        episode_success(0.1, steps)


# --- trajectory similarity --------------------------------------------------------------


def test_trajectory_similarity_hand_case():
    # [a, a, b] vs [a, b, c]: min sums a 1 + b 1 + c 0 = 2; max sums a 2 + b 1 + c 1 = 4 -> 0.5
    assert trajectory_similarity(["a", "a", "b"], ["a", "b", "c"]) == 0.5


def test_trajectory_similarity_ignores_order():
    assert trajectory_similarity(["search", "calc"], ["calc", "search"]) == 1.0


def test_trajectory_similarity_counts_repeats():
    # [a] vs [a, a, a]: min 1, max 3 -> 1/3 (a set Jaccard would say 1)
    assert trajectory_similarity(["a"], ["a", "a", "a"]) == 1 / 3


def test_trajectory_similarity_disjoint_and_empty():
    assert trajectory_similarity(["a"], ["b"]) == 0.0
    assert trajectory_similarity([], []) == 1.0
    assert trajectory_similarity([], ["a"]) == 0.0


def test_trajectory_similarity_is_symmetric():
    a, b = ["x", "y", "y", "z"], ["y", "z", "z"]
    # min: x 0 + y 1 + z 1 = 2; max: x 1 + y 2 + z 2 = 5
    assert trajectory_similarity(a, b) == trajectory_similarity(b, a) == 2 / 5


def test_trajectory_similarity_refuses_a_bare_string():
    with pytest.raises(ValueError, match="not a string"):
        trajectory_similarity("search", ["search"])


def test_mean_pairwise_similarity():
    # pairs: (A, B) 0.5 as above; (A, C) [a, a, b] vs [a]: 1/3; (B, C) [a, b, c] vs [a]: 1/3
    trajectories = [["a", "a", "b"], ["a", "b", "c"], ["a"]]
    assert mean_pairwise_similarity(trajectories) == pytest.approx((0.5 + 1 / 3 + 1 / 3) / 3)


def test_mean_pairwise_similarity_of_identical_runs_is_one():
    assert mean_pairwise_similarity(iter([["a", "b"], ["b", "a"], ["a", "b"]])) == 1.0
    assert mean_pairwise_similarity([[], []]) == 1.0


@pytest.mark.parametrize("trajectories", [[], [["a", "b"]]])
def test_mean_pairwise_similarity_needs_two(trajectories):
    assert mean_pairwise_similarity(trajectories) is None


def test_mean_pairwise_similarity_refuses_a_bare_string():
    with pytest.raises(ValueError, match="not a string"):
        mean_pairwise_similarity([["a"], "ab"])


def test_pairwise_mean_equals_the_mean_over_every_pair():
    # Grouping identical multisets must not change the mean: check against every pair.
    import itertools
    import random

    rng = random.Random(7)
    trajectories = [[rng.choice("abc") for _ in range(rng.randint(0, 3))] for _ in range(40)]
    pairs = [trajectory_similarity(a, b) for a, b in itertools.combinations(trajectories, 2)]
    assert mean_pairwise_similarity(trajectories) == pytest.approx(sum(pairs) / len(pairs), abs=1e-12)
