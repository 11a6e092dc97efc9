"""Bayesian intervals for the success rate, pass@k and pass^k, and the estimators they wrap."""

from __future__ import annotations

import doctest
import importlib
import re
from dataclasses import FrozenInstanceError
from itertools import combinations

import numpy as np
import pytest

from spanscore.processors.metrics import (
    Interval,
    mean_rate_interval,
    pass_at_k,
    pass_at_k_interval,
    pass_at_k_unbiased,
    pass_pow_k,
    pass_pow_k_interval,
    pass_pow_k_unbiased,
    success_rate_interval,
)


def test_docstring_examples():
    module = importlib.import_module("spanscore.processors.metrics.intervals")
    assert doctest.testmod(module).failed == 0


# --- point estimates: the definition's example and brute force --------------------------


def test_seed_worked_example():
    # 7 of 10 correct, k = 3: p = 0.7; pass@3 = 1 - 0.3**3 = 0.973; pass^3 = 0.7**3 = 0.343
    assert pass_at_k(10, 7, 3) == pytest.approx(0.973)
    assert pass_pow_k(10, 7, 3) == pytest.approx(0.343)


def _brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """Shares of the k-subsets of n tries (c of them successes) with >= 1 success / all successes."""
    tries = [True] * c + [False] * (n - c)
    subsets = list(combinations(tries, k))
    any_success = sum(any(subset) for subset in subsets)
    all_success = sum(all(subset) for subset in subsets)
    return any_success / len(subsets), all_success / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [(n, c, k) for n in range(1, 8) for c in range(n + 1) for k in range(1, n + 1)],
)
def test_unbiased_forms_match_enumeration_of_k_subsets(n, c, k):
    at_k, pow_k = _brute_force(n, c, k)
    assert pass_at_k_unbiased(n, c, k) == pytest.approx(at_k, abs=1e-12)
    assert pass_pow_k_unbiased(n, c, k) == pytest.approx(pow_k, abs=1e-12)


@pytest.mark.parametrize("function", [pass_at_k_unbiased, pass_pow_k_unbiased])
@pytest.mark.parametrize(("n", "c", "k"), [(3, 0, 4), (3, 3, 4), (1, 1, 2)])
def test_unbiased_forms_refuse_k_above_n(function, n, c, k):
    with pytest.raises(ValueError, match="k <= n"):
        function(n, c, k)


def test_unbiased_edges_no_success_and_all_successes():
    for n in range(1, 8):
        for k in range(1, n + 1):
            assert pass_at_k_unbiased(n, 0, k) == 0.0
            assert pass_pow_k_unbiased(n, 0, k) == 0.0
            assert pass_at_k_unbiased(n, n, k) == 1.0
            assert pass_pow_k_unbiased(n, n, k) == 1.0


# --- the interval recipe, value for value -----------------------------------------------


def _recipe(c: int, n: int, statistic, ci_level: float = 0.95, samples: int = 5000, seed: int = 42):
    """The recipe of docs/eval-suites.md, written out independently of the module."""
    rng = np.random.default_rng(seed)
    p = rng.beta(1 + c, 1 + n - c, size=samples)
    s = statistic(p)
    tail = {0.95: 0.025, 0.9: 0.05}[ci_level]  # the quantiles of docs/eval-suites.md, written out
    low, high = np.quantile(s, [tail, 1 - tail])
    return float(np.mean(s)), float(low), float(high)


CASES = [(10, 7), (5, 0), (5, 5), (1, 1), (100, 90), (3, 1)]


@pytest.mark.parametrize(("n", "c"), CASES)
def test_success_rate_interval_is_the_recipe(n, c):
    interval = success_rate_interval(c, n)
    assert (interval.mean, interval.low, interval.high) == _recipe(c, n, lambda p: p)


@pytest.mark.parametrize(("n", "c"), CASES)
@pytest.mark.parametrize("k", [1, 3, 12])
def test_pass_at_k_interval_is_the_recipe(n, c, k):
    interval = pass_at_k_interval(n, c, k)
    assert (interval.mean, interval.low, interval.high) == _recipe(c, n, lambda p: 1 - (1 - p) ** k)


@pytest.mark.parametrize(("n", "c"), CASES)
@pytest.mark.parametrize("k", [1, 3, 12])
def test_pass_pow_k_interval_is_the_recipe(n, c, k):
    interval = pass_pow_k_interval(n, c, k)
    assert (interval.mean, interval.low, interval.high) == _recipe(c, n, lambda p: p**k)


def test_recipe_with_other_settings():
    # ci_level 0.9 -> quantiles [0.05, 0.95]; 200 samples; seed 7
    interval = pass_at_k_interval(10, 7, 3, ci_level=0.9, samples=200, seed=7)
    expected = _recipe(7, 10, lambda p: 1 - (1 - p) ** 3, ci_level=0.9, samples=200, seed=7)
    assert (interval.mean, interval.low, interval.high) == expected


def test_seed_example_interval_brackets_the_plug_in():
    # 7 of 10, k = 3: the interval holds the plug-in values 0.973 and 0.343.
    at_k = pass_at_k_interval(10, 7, 3)
    pow_k = pass_pow_k_interval(10, 7, 3)
    assert at_k.low < pass_at_k(10, 7, 3) <= at_k.high
    assert pow_k.low < pass_pow_k(10, 7, 3) < pow_k.high
    # The posterior Beta(8, 4) has mean 8/12, so the sampled rate's mean is near 2/3, not 0.7.
    assert success_rate_interval(7, 10).mean == pytest.approx(8 / 12, abs=0.01)


def test_same_counts_give_the_same_interval_whatever_ran_before():
    first = pass_at_k_interval(10, 7, 3)
    success_rate_interval(1, 4)
    pass_pow_k_interval(50, 20, 5)
    assert pass_at_k_interval(10, 7, 3) == first


def test_intervals_are_ordered_and_within_unit_range():
    for n, c in CASES:
        for interval in (success_rate_interval(c, n), pass_at_k_interval(n, c, 3), pass_pow_k_interval(n, c, 3)):
            assert 0 <= interval.low <= interval.mean <= interval.high <= 1


def test_more_data_narrows_the_interval():
    few = success_rate_interval(9, 10)
    many = success_rate_interval(90, 100)
    assert many.high - many.low < few.high - few.low


def test_k_may_exceed_n_for_the_interval():
    interval = pass_at_k_interval(2, 1, 5)
    assert (interval.mean, interval.low, interval.high) == _recipe(1, 2, lambda p: 1 - (1 - p) ** 5)


def test_single_sample_is_a_point():
    interval = success_rate_interval(3, 4, samples=1)
    assert interval.low == interval.mean == interval.high


def test_interval_is_frozen():
    interval = Interval(mean=0.5, low=0.2, high=0.8)
    with pytest.raises(FrozenInstanceError):
        interval.mean = 0.6  # type: ignore[misc]


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "total", "message"),
    [
        (0, 0, "total"),
        (1, -1, "total"),
        (-1, 3, "successes"),
        (4, 3, "successes"),
        (1.0, 3, "successes must be an int"),
        (1, 3.0, "total must be an int"),
        (True, 3, "successes must be an int"),
    ],
)
def test_success_rate_counts_are_validated(successes, total, message):
    with pytest.raises(ValueError, match=message):
        success_rate_interval(successes, total)


@pytest.mark.parametrize("function", [pass_at_k_interval, pass_pow_k_interval])
@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (0, 0, 1, "n"),
        (3, -1, 1, "c"),
        (3, 4, 1, "c"),
        (3, 1, 0, "k"),
        (3, 1, -1, "k"),
        (3, 1, 1.5, "k must be an int"),
        (3, 1, True, "k must be an int"),
    ],
)
def test_pass_counts_are_validated(function, n, c, k, message):
    with pytest.raises(ValueError, match=message):
        function(n, c, k)


@pytest.mark.parametrize("ci_level", [0, 1, -0.5, 1.5, float("nan"), float("inf"), True, "0.95"])
def test_ci_level_is_validated(ci_level):
    with pytest.raises(ValueError, match="ci_level"):
        success_rate_interval(1, 2, ci_level=ci_level)
    with pytest.raises(ValueError, match="ci_level"):
        pass_at_k_interval(2, 1, 1, ci_level=ci_level)
    with pytest.raises(ValueError, match="ci_level"):
        pass_pow_k_interval(2, 1, 1, ci_level=ci_level)


@pytest.mark.parametrize("samples", [0, -5, 10.0, True])
def test_samples_is_validated(samples):
    with pytest.raises(ValueError, match="samples"):
        success_rate_interval(1, 2, samples=samples)
    with pytest.raises(ValueError, match="samples"):
        pass_at_k_interval(2, 1, 1, samples=samples)
    with pytest.raises(ValueError, match="samples"):
        pass_pow_k_interval(2, 1, 1, samples=samples)


# --- a mean of per-unit rates: SSR over attempts, a suite's pass@k over cases -----------


@pytest.mark.parametrize(("n", "c"), CASES)
def test_mean_rate_interval_of_zeros_and_ones_is_the_success_rate_interval(n, c):
    rates = [1.0] * c + [0.0] * (n - c)
    assert mean_rate_interval(rates) == success_rate_interval(c, n)


def test_mean_rate_interval_counts_each_rate_as_fractional_successes():
    # Per-attempt step rates 1, 1/2, 1, 3/4: S = 3.25 over 4 tries -> Beta(4.25, 1.75).
    interval = mean_rate_interval([1.0, 0.5, 1.0, 0.75])
    rng = np.random.default_rng(42)
    p = rng.beta(1 + 3.25, 1 + 4 - 3.25, size=5000)
    low, high = np.quantile(p, [0.025, 0.975])
    assert (interval.mean, interval.low, interval.high) == (float(np.mean(p)), float(low), float(high))
    assert interval.low < 3.25 / 4 < interval.high


def test_mean_rate_interval_is_order_free_and_brackets_a_large_mean():
    rates = [i / 7 for i in range(8)] * 50
    assert mean_rate_interval(rates) == mean_rate_interval(list(reversed(rates)))
    interval = mean_rate_interval(rates)
    assert interval.low < 0.5 < interval.high and interval.high - interval.low < 0.1


@pytest.mark.parametrize(
    ("rates", "message"),
    [
        ([], "at least one rate"),
        ([0.5, 1.2], "within [0, 1]"),
        ([float("nan")], "within [0, 1]"),
        ([True], "a number"),
        (["0.5"], "a number"),
    ],
)
def test_mean_rate_interval_rates_are_validated(rates, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mean_rate_interval(rates)
