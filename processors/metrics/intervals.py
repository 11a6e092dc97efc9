"""Bayesian credible intervals for a success rate and for pass@k and pass^k.

The recipe is fair-forge's Bayesian mode. With c successes in n tries and a uniform
prior, the success rate has the posterior p ~ Beta(1 + c, 1 + n - c). `samples` values
of p are drawn as

    rng = numpy.random.default_rng(seed)
    p = rng.beta(1 + c, 1 + n - c, size=samples)

The statistic is computed for each sample: p itself for the success rate,
1 - (1 - p)**k for pass@k and p**k for pass^k. The result is the sample mean and the
equal-tailed interval numpy.quantile(s, [(1 - ci_level) / 2, 1 - (1 - ci_level) / 2]).

Unlike fair-forge, every computation seeds its own generator. fair-forge draws from one
generator shared by all conversations, so a conversation's interval depends on how many
draws came before it, that is on the order of the conversations. Here the same counts
and settings always give the same interval.

The mean is the mean of the posterior samples, not the plug-in estimate: with 7 of 10
it is near 8/12 (the Beta(8, 4) mean), not 0.7. Use `pass_at_k` and `pass_pow_k` for
the point estimates and these functions for their uncertainty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real

import numpy as np

DEFAULT_CI_LEVEL = 0.95
DEFAULT_SAMPLES = 5000
DEFAULT_SEED = 42


@dataclass(frozen=True)
class Interval:
    """A sample mean and the equal-tailed credible interval around it, low <= high."""

    mean: float
    low: float
    high: float


def _check_int(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")


def _check_counts(total: int, successes: int, total_name: str, successes_name: str) -> None:
    _check_int(total, total_name)
    _check_int(successes, successes_name)
    if total < 1:
        raise ValueError(f"{total_name} (tries) must be >= 1, got {total}")
    if not 0 <= successes <= total:
        raise ValueError(f"{successes_name} (successes) must be within [0, {total_name}={total}], got {successes}")


def _check_k(k: int) -> None:
    _check_int(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _check_sampling(ci_level: float, samples: int) -> None:
    if isinstance(ci_level, bool) or not isinstance(ci_level, Real):
        raise ValueError(f"ci_level must be a number, got {ci_level!r}")
    if not (math.isfinite(ci_level) and 0 < ci_level < 1):
        raise ValueError(f"ci_level must be within (0, 1), got {ci_level}")
    _check_int(samples, "samples")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")


def _interval(
    n: int,
    c: float,
    statistic: Callable[[np.ndarray], np.ndarray],
    ci_level: float,
    samples: int,
    seed: int,
) -> Interval:
    rng = np.random.default_rng(seed)
    p = rng.beta(1 + c, 1 + n - c, size=samples)
    s = statistic(p)
    low, high = np.quantile(s, _tails(ci_level))
    return Interval(mean=float(np.mean(s)), low=float(low), high=float(high))


def _k_interval(
    n: int,
    c: int,
    k: int,
    statistic: Callable[[np.ndarray], np.ndarray],
    ci_level: float,
    samples: int,
    seed: int,
) -> Interval:
    """`_interval` for a statistic of k tries (pass@k, pass^k), its arguments checked."""
    _check_counts(n, c, "n", "c")
    _check_k(k)
    _check_sampling(ci_level, samples)
    return _interval(n, c, statistic, ci_level, samples, seed)


def _tails(ci_level: float) -> list[float]:
    # In decimal, so 0.95 gives the quantiles of docs/eval-suites.md, [0.025, 0.975],
    # exactly rather than the binary float arithmetic's 0.025000000000000022.
    tail = Fraction(1 - Fraction(str(ci_level))) / 2
    return [float(tail), float(1 - tail)]


def success_rate_interval(
    successes: int,
    total: int,
    ci_level: float = DEFAULT_CI_LEVEL,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The posterior interval of the success rate p itself (TSR, or a case's pass@1).

    >>> i = success_rate_interval(7, 10)
    >>> i.low < 0.7 < i.high
    True
    """
    _check_counts(total, successes, "total", "successes")
    _check_sampling(ci_level, samples)
    return _interval(total, successes, lambda p: p, ci_level, samples, seed)


def pass_at_k_interval(
    n: int, c: int, k: int, ci_level: float = DEFAULT_CI_LEVEL, samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED
) -> Interval:
    """The posterior interval of pass@k = 1 - (1 - p)**k, c successes of n tries.

    k may exceed n, as for the plug-in `pass_at_k`: p is a rate, not a draw from the n.

    >>> i = pass_at_k_interval(10, 7, 3)
    >>> i.low < i.mean < i.high <= 1
    True
    """
    return _k_interval(n, c, k, lambda p: 1 - (1 - p) ** k, ci_level, samples, seed)


def pass_pow_k_interval(
    n: int, c: int, k: int, ci_level: float = DEFAULT_CI_LEVEL, samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED
) -> Interval:
    """The posterior interval of pass^k = p**k, c successes of n tries.

    >>> i = pass_pow_k_interval(10, 7, 3)
    >>> 0 <= i.low < i.mean < i.high
    True
    """
    return _k_interval(n, c, k, lambda p: p**k, ci_level, samples, seed)


def mean_rate_interval(
    values: Sequence[float],
    ci_level: float = DEFAULT_CI_LEVEL,
    samples: int = DEFAULT_SAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """The interval of a mean of per-unit rates in [0, 1], by the same recipe.

    For the SSR (each episode's share of correct steps) and a suite's pass@k (each
    case's estimate): every unit is one try that succeeded by its rate, so the m units
    give p ~ Beta(1 + S, 1 + m - S) with S the sum of the rates (fractional successes).
    With rates of 0 and 1 this is exactly `success_rate_interval`. The width follows the
    number of units, as it should for a mean over them: averaging each unit's own
    posterior instead would pull every rate toward 1/2 by its prior and give a narrow
    interval around a value far from the mean.

    >>> i = mean_rate_interval([1.0, 0.5, 1.0, 1.0])
    >>> i.low < 0.875 < i.high
    True
    """
    rates = [_checked_rate(v) for v in values]
    if not rates:
        raise ValueError("mean_rate_interval needs at least one rate")
    _check_sampling(ci_level, samples)
    return _interval(len(rates), math.fsum(rates), lambda p: p, ci_level, samples, seed)


def _checked_rate(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"a rate must be a number within [0, 1], got {value!r}")
    return float(value)


__all__ = ["Interval", "mean_rate_interval", "pass_at_k_interval", "pass_pow_k_interval", "success_rate_interval"]
