"""Reliability arithmetic for multi-step agents: success rates, error budgets, similarity.

- Task success rate (TSR): successful episodes / episodes. What users feel.
- Step success rate (SSR): the mean over episodes of correct steps / steps. A
  diagnostic: high SSR with low TSR means the errors sit in few steps.
- Error budget: an episode of N steps, each failing independently with probability ε,
  succeeds with probability (1 - ε)**N; to reach a target TSR τ each step may fail at
  most ε = 1 - τ**(1/N). For τ = 0.9 and N = 10 that is about 0.0105.
- Trajectory similarity: Jaccard over tool-call multisets, for tasks with several valid
  paths where exact matching of the call sequence is too strict.

For the uncertainty of a TSR over few episodes, use `success_rate_interval`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import combinations
from numbers import Real

import numpy as np


def _check_outcome(value: object, where: str) -> bool:
    # A score such as 0.7 must not be counted as a success because it is truthy.
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where} must be a bool, got {value!r}")
    return bool(value)


def _check_steps(steps: int) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ValueError(f"steps must be an int, got {steps!r}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")


def _check_number(value: float, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def task_success_rate(outcomes: Iterable[bool]) -> float:
    """TSR: the share of episodes that succeeded. No episodes is a ValueError.

    >>> task_success_rate([True, True, False, True])
    0.75
    """
    results = [_check_outcome(outcome, "an episode outcome") for outcome in outcomes]
    if not results:
        raise ValueError("task_success_rate needs at least one episode")
    return sum(results) / len(results)


def step_success_rate(episodes: Iterable[Sequence[bool]]) -> float:
    """SSR: the mean over episodes of correct steps / steps.

    Episodes without steps have no step rate and are left out; when none is left, the
    rate is undefined and ValueError is raised.

    >>> step_success_rate([[True, True, False, True], [True, False], []])  # (3/4 + 1/2) / 2
    0.625
    """
    rates = []
    for episode in episodes:
        steps = [_check_outcome(step, "a step outcome") for step in episode]
        if steps:
            rates.append(sum(steps) / len(steps))
    if not rates:
        raise ValueError("step_success_rate needs at least one episode with steps")
    return sum(rates) / len(rates)


def error_budget(target_tsr: float, steps: int) -> float:
    """The largest per-step error rate ε with (1 - ε)**steps >= target_tsr: 1 - τ**(1/N).

    target_tsr must be within (0, 1] (τ = 0 allows any error; τ = 1 allows none),
    steps >= 1.

    >>> round(error_budget(0.9, 10), 4)  # 1 - 0.9**0.1
    0.0105
    """
    _check_number(target_tsr, "target_tsr")
    if not 0 < target_tsr <= 1:
        raise ValueError(f"target_tsr must be within (0, 1], got {target_tsr}")
    _check_steps(steps)
    return 1 - target_tsr ** (1 / steps)


def episode_success(step_error: float, steps: int) -> float:
    """The expected episode success (1 - ε)**N when each of N steps fails with rate ε.

    step_error must be within [0, 1], steps >= 1.

    >>> round(episode_success(0.1, 10), 4)  # 0.9**10
    0.3487
    """
    _check_number(step_error, "step_error")
    if not 0 <= step_error <= 1:
        raise ValueError(f"step_error must be within [0, 1], got {step_error}")
    _check_steps(steps)
    return (1 - step_error) ** steps


def _tool_counts(tools: Iterable[str], name: str) -> Counter[str]:
    # A bare string is iterable too, and would be read as one tool per character.
    if isinstance(tools, str):
        raise ValueError(f"{name} must be a sequence of tool names, not a string: {tools!r}")
    return Counter(tools)


def trajectory_similarity(tools_a: Iterable[str], tools_b: Iterable[str]) -> float:
    """Jaccard similarity of two tool-call multisets, order ignored.

    Σ min(countA, countB) / Σ max(countA, countB) over tool names; two empty
    trajectories are identical, 1.0.

    >>> trajectory_similarity(["search", "search", "calc"], ["search", "calc", "mail"])  # 2 / 4
    0.5
    """
    return _similarity(_tool_counts(tools_a, "tools_a"), _tool_counts(tools_b, "tools_b"))


def _similarity(a: Counter, b: Counter) -> float:
    names = a.keys() | b.keys()
    union = sum(max(a[name], b[name]) for name in names)
    if union == 0:
        return 1.0
    return sum(min(a[name], b[name]) for name in names) / union


def mean_pairwise_similarity(trajectories: Iterable[Sequence[str]]) -> float | None:
    """The mean `trajectory_similarity` over all unordered pairs; fewer than two → None.

    >>> mean_pairwise_similarity([["a"], ["a"], ["b"]])  # pairs: 1, 0, 0
    0.3333333333333333
    """
    counts = [_tool_counts(tools, "a trajectory") for tools in trajectories]
    if len(counts) < 2:
        return None
    # Attempts of one case often call the same tools: each distinct multiset is compared
    # once and weighted by how many attempts share it (identical ones score 1.0).
    groups = Counter(frozenset(c.items()) for c in counts)
    distinct = [(Counter(dict(items)), weight) for items, weight in groups.items()]
    total = sum(weight * (weight - 1) / 2 for _, weight in distinct)
    for (a, wa), (b, wb) in combinations(distinct, 2):
        total += wa * wb * _similarity(a, b)
    return total / (len(counts) * (len(counts) - 1) / 2)


__all__ = [
    "episode_success",
    "error_budget",
    "mean_pairwise_similarity",
    "step_success_rate",
    "task_success_rate",
    "trajectory_similarity",
]
