"""agent_inspect's progress arithmetic: subgoal progress per turn, AUC, PPT, success.

A case lists subgoals (grading notes). After each turn of a session, a judge decides
which of the subgoals not yet completed the trajectory so far completes; a completed
subgoal stays completed. progress(t) = completed subgoals / subgoals, so the progress
list never decreases. These functions are the arithmetic around those verdicts: no
judge calls, plain floats in and out.

- `progress_through_turns`: the progress list from the per-turn verdicts.
- `pad_progress`: the list cut to `max_turns` turns (default 20), or padded with its
  last value up to `max_turns`, as agent_inspect does before AUC and PPT.
- `progress_auc`, `progress_per_turn`, `success_final_turn`: the scores of a padded list.
- `static_progress`: completed / judged, for static conversations whose subgoals each
  name the turn they are judged at.

agent_inspect rounds its scores to 4 decimals; these functions do not round (rounding
is for presentation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Real

DEFAULT_MAX_TURNS = 20


def _check_max_turns(max_turns: int) -> None:
    if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
        raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")


def _check_progress(progress: Sequence[float]) -> list[float]:
    """The progress values as floats; ValueError when empty or a value is not in [0, 1]."""
    values = list(progress)
    if not values:
        raise ValueError("progress is empty: a session scored for progress has at least one turn")
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise ValueError(f"progress[{index}] must be a number, got {value!r}")
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"progress[{index}] must be within [0, 1], got {value!r}")
    return [float(value) for value in values]


def _check_count(value: int, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def pad_progress(progress: Sequence[float], max_turns: int = DEFAULT_MAX_TURNS) -> list[float]:
    """The progress list cut to `max_turns` values, or padded with its last value up to it.

    Turns past `max_turns` are not evaluated (agent_inspect stops judging there); a
    shorter session keeps the progress it ended with for the turns it did not need:

    >>> pad_progress([0.5, 0.5, 1.0], max_turns=4)
    [0.5, 0.5, 1.0, 1.0]
    >>> pad_progress([0.25, 0.5, 0.75], max_turns=2)
    [0.25, 0.5]

    An empty list raises ValueError: there is no last value to pad with, and a session
    has at least one turn, so an empty list is a bug upstream (agent_inspect raises on
    it too). A value outside [0, 1] and `max_turns` < 1 raise ValueError.
    """
    _check_max_turns(max_turns)
    values = _check_progress(progress)[:max_turns]
    return values + [values[-1]] * (max_turns - len(values))


def progress_auc(padded: Sequence[float]) -> float:
    """Area under the progress curve, with the n values spread evenly over x in [0, 1].

    The trapezoid rule: AUC = Σ (p[i] + p[i+1]) / 2 for i in 0..n-2, divided by n - 1
    (the width of each step). A single value is a flat curve: AUC = p[0].

    >>> progress_auc([0.5, 0.5, 1.0, 1.0])
    0.75
    """
    values = _check_progress(padded)
    n = len(values)
    if n == 1:
        return values[0]
    return sum((values[i] + values[i + 1]) / 2 for i in range(n - 1)) / (n - 1)


def progress_per_turn(padded: Sequence[float]) -> float:
    """Progress per turn (PPT): the final progress over the turns it took to get there.

    m = max(p); T = the first index with p[T] == m; PPT = m / (T + 1). The progress
    list never decreases, so m is the final progress and T + 1 the number of turns
    needed to reach it (agent_inspect: p(T) / T with 1-based turns). No progress at all
    (all zeros) gives 0.

    >>> progress_per_turn([0.5, 0.5, 1.0, 1.0])  # 1 / 3
    0.3333333333333333
    """
    values = _check_progress(padded)
    best = max(values)
    if best == 0.0:
        return 0.0
    return best / (values.index(best) + 1)


def success_final_turn(padded: Sequence[float]) -> float:
    """1.0 when the last value of the (padded) progress list is 1, else 0.0.

    The SuccessScore test (progress == 1: every subgoal completed) on the final turn.
    """
    values = _check_progress(padded)
    return 1.0 if values[-1] == 1.0 else 0.0


def progress_through_turns(verdicts_per_turn: Sequence[Iterable[int]], subgoal_count: int) -> list[float]:
    """The progress list from, per turn, the subgoals the judge found completed there.

    `verdicts_per_turn[t]` holds the 0-based indices of the subgoals completed at turn
    t. A completed subgoal stays completed, so progress(t) = |union of the sets up to
    t| / subgoal_count; a subgoal found again at a later turn is not counted twice.

    >>> progress_through_turns([set(), {1}, {0, 3}], subgoal_count=4)
    [0.0, 0.25, 0.75]

    The list has one value per turn given; cutting and padding to `max_turns` is
    `pad_progress`'s job. `subgoal_count` must be >= 1 (progress over no subgoals is
    undefined) and every index within range(subgoal_count), else ValueError.
    """
    _check_count(subgoal_count, "subgoal_count", 1)
    completed: set[int] = set()
    progress = []
    for turn, verdicts in enumerate(verdicts_per_turn):
        for index in verdicts:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < subgoal_count:
                raise ValueError(f"turn {turn}: subgoal index must be an int in [0, {subgoal_count}), got {index!r}")
            completed.add(index)
        progress.append(len(completed) / subgoal_count)
    return progress


def static_progress(completed: int, judged: int) -> float:
    """Progress of a static conversation: completed subgoals / judged subgoals.

    In a static conversation each subgoal names the 0-based turn it is judged at (on
    turns 0..turn), once; `judged` counts the subgoals that were judged, `completed`
    those found complete. `judged` must be >= 1 (a ratio over nothing is undefined) and
    0 <= completed <= judged, else ValueError.
    """
    _check_count(judged, "judged", 1)
    _check_count(completed, "completed", 0)
    if completed > judged:
        raise ValueError(f"completed ({completed}) cannot exceed judged ({judged})")
    return completed / judged


__all__ = [
    "DEFAULT_MAX_TURNS",
    "pad_progress",
    "progress_auc",
    "progress_per_turn",
    "progress_through_turns",
    "static_progress",
    "success_final_turn",
]
