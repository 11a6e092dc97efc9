"""N independent judgments of one call, and how their answers aggregate.

A weak or sampled judge disagrees with itself; asking N times and taking the median
score (or the majority verdict) trades calls for stability. Trials vary nothing in the
prompt except a trial number, so a caching judge does not answer them all from one
cache entry.

Early stop follows agent_inspect's `optimize_judge_trials`: run a first wave of
`N // 2 + 1` trials; if every decision already has that many votes on one side, the
rest cannot change any majority and are not run. Otherwise run the smallest wave that
could settle every open decision, and repeat until settled or N trials have run.
Decisions are what the answers vote on: pass/fail against the threshold for a score
(for odd N the median passes exactly when most trials pass, so the label of the median
is settled too), yes/no for each verdict.
"""

from __future__ import annotations

import asyncio
import math
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from spanscore.processors.judge_metrics.base import JudgeError

# Spread statistics are rounded like other metadata; scores keep full precision.
METADATA_DECIMALS = 4


def validate_trials(trials: int) -> None:
    """Majorities need an odd count: an even N could tie on every verdict."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1 or trials % 2 == 0:
        raise ValueError(f"trials must be a positive odd integer, got {trials!r}")


@dataclass
class TrialRun:
    """The answers of the trials that ran (in trial order) and the errors of those that failed."""

    requested: int
    answers: list[dict[str, Any]] = field(default_factory=list)
    errors: list[JudgeError] = field(default_factory=list)

    @property
    def run(self) -> int:
        return len(self.answers) + len(self.errors)


Votes = Callable[[dict[str, Any]], Mapping[str, bool]]


async def run_trials(
    ask: Callable[[int], Awaitable[dict[str, Any]]],
    trials: int,
    *,
    votes: Votes | None = None,
    early_stop: bool = False,
) -> TrialRun:
    """Calls `ask(trial_index)` up to `trials` times, concurrently within a wave.

    `votes(answer)` names the decisions an answer takes (decision -> side); it is
    needed only for early stop. A JudgeError fails that trial alone; the caller
    decides what to do when none succeeded. Any other exception propagates.
    """
    validate_trials(trials)
    run = TrialRun(requested=trials)
    need = trials // 2 + 1
    wave = need if (early_stop and votes is not None) else trials
    next_index = 0
    while wave > 0:
        indices = range(next_index, next_index + wave)
        next_index += wave
        outcomes = await asyncio.gather(*(_attempt(ask, i) for i in indices))
        for outcome in outcomes:
            if isinstance(outcome, JudgeError):
                run.errors.append(outcome)
            else:
                run.answers.append(outcome)
        remaining = trials - next_index
        if remaining <= 0 or votes is None or not early_stop:
            break
        wave = min(remaining, _trials_to_settle([votes(answer) for answer in run.answers], need))
    return run


async def _attempt(ask: Callable[[int], Awaitable[dict[str, Any]]], index: int) -> dict[str, Any] | JudgeError:
    try:
        return await ask(index)
    except JudgeError as exc:
        return exc


def _trials_to_settle(ballots: Sequence[Mapping[str, bool]], need: int) -> int:
    """The fewest further trials after which every decision could have a majority;
    0 when all are settled. No votes yet (all trials failed) means one more try."""
    tallies: dict[str, Counter[bool]] = {}
    for ballot in ballots:
        for decision, side in ballot.items():
            tallies.setdefault(decision, Counter())[bool(side)] += 1
    if not tallies:
        return 1
    wanted = 0
    for tally in tallies.values():
        if max(tally[True], tally[False]) >= need:
            continue
        wanted = max(wanted, min(need - tally[True], need - tally[False]))
    return wanted


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def majority(labels: Sequence[str], tie: str) -> str:
    """The most frequent label. Ties happen only when failed trials left an even count;
    they go to `tie` (the cautious side, e.g. "no")."""
    counts = Counter(labels)
    top = counts.most_common()
    if not top:
        raise ValueError("majority of no labels")
    if len(top) > 1 and top[0][1] == top[1][1]:
        return tie
    return top[0][0]


def spread(values: Sequence[float]) -> dict[str, float]:
    """min, max and population standard deviation of the trial scores."""
    return {
        "min": round(min(values), METADATA_DECIMALS),
        "max": round(max(values), METADATA_DECIMALS),
        "stdev": round(statistics.pstdev(values), METADATA_DECIMALS) if len(values) > 1 else 0.0,
    }


def closest_to(values: Sequence[float], target: float) -> int:
    """Index of the first value nearest `target`: whose explanation speaks for the median."""
    return min(range(len(values)), key=lambda i: (abs(values[i] - target), i))


def trials_metadata(run: TrialRun, scores: Sequence[float]) -> dict[str, Any]:
    """What a result records about its trials: how many ran, each score, the spread."""
    return {
        "requested": run.requested,
        "run": run.run,
        "failed": len(run.errors),
        "scores": [round(s, METADATA_DECIMALS) for s in scores],
        **spread(scores),
    }


def is_unit_score(value: Any) -> TypeGuard[float]:
    """A real number in [0, 1]; bools are not scores even though Python says they are ints."""
    return (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0.0 <= value <= 1.0
    )
