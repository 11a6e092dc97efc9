"""pass@k and pass^k: fair-forge's plug-in forms and the unbiased estimators."""

from __future__ import annotations

import doctest
import importlib
from fractions import Fraction
from math import comb

import pytest

from spanscore.processors.metrics import pass_at_k, pass_at_k_unbiased, pass_pow_k, pass_pow_k_unbiased

ALL = (pass_at_k, pass_pow_k, pass_at_k_unbiased, pass_pow_k_unbiased)


def test_docstring_examples():
    # The package's `pass_at_k` attribute is the function, so the module is looked up by name.
    module = importlib.import_module("spanscore.processors.metrics.pass_at_k")
    assert doctest.testmod(module).failed == 0


# --- plug-in ---------------------------------------------------------------------------


def test_plug_in_the_seed_example():
    # 7 of 10 correct, k = 3: p = 0.7; pass@3 = 1 - 0.3**3 = 0.973; pass^3 = 0.7**3 = 0.343
    assert pass_at_k(10, 7, 3) == pytest.approx(0.973)
    assert pass_pow_k(10, 7, 3) == pytest.approx(0.343)


def test_plug_in_no_success_is_zero():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_pow_k(10, 0, 3) == 0.0


def test_plug_in_all_successes_is_one():
    assert pass_at_k(4, 4, 3) == 1.0
    assert pass_pow_k(4, 4, 100) == 1.0


def test_plug_in_k_may_exceed_n():
    # p = 1/2, k = 5: 1 - 0.5**5 = 31/32; 0.5**5 = 1/32
    assert pass_at_k(2, 1, 5) == 31 / 32
    assert pass_pow_k(2, 1, 5) == 1 / 32


def test_plug_in_k_one_is_the_success_rate():
    assert pass_at_k(4, 1, 1) == 1 / 4
    assert pass_pow_k(4, 1, 1) == 1 / 4


def test_plug_in_grows_and_shrinks_with_k():
    assert pass_at_k(4, 1, 1) < pass_at_k(4, 1, 2) < pass_at_k(4, 1, 3)
    assert pass_pow_k(4, 3, 1) > pass_pow_k(4, 3, 2) > pass_pow_k(4, 3, 3)


# --- unbiased --------------------------------------------------------------------------


def test_unbiased_pass_at_k():
    # n = 5, c = 2, k = 2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 7/10
    assert pass_at_k_unbiased(5, 2, 2) == 7 / 10


def test_unbiased_pass_pow_k():
    # n = 5, c = 3, k = 2: C(3,2)/C(5,2) = 3/10
    assert pass_pow_k_unbiased(5, 3, 2) == 3 / 10


def test_unbiased_k_one_is_the_success_rate():
    # 1 - C(n-c,1)/C(n,1) = c/n; C(c,1)/C(n,1) = c/n
    assert pass_at_k_unbiased(10, 7, 1) == 7 / 10
    assert pass_pow_k_unbiased(10, 7, 1) == 7 / 10


def test_unbiased_edges():
    assert pass_at_k_unbiased(5, 0, 2) == 0.0
    assert pass_pow_k_unbiased(5, 0, 2) == 0.0
    assert pass_at_k_unbiased(5, 5, 2) == 1.0
    assert pass_pow_k_unbiased(5, 5, 2) == 1.0


def test_unbiased_fewer_failures_than_k_always_passes():
    # n - c = 1 < k = 2: C(1,2) = 0 -> pass@2 = 1
    assert pass_at_k_unbiased(5, 4, 2) == 1.0


def test_unbiased_fewer_successes_than_k_never_all_pass():
    # c = 1 < k = 2: C(1,2) = 0 -> pass^2 = 0
    assert pass_pow_k_unbiased(5, 1, 2) == 0.0


def test_unbiased_k_equals_n():
    # Drawing all n tries: at least one success iff c > 0; all successes iff c == n.
    assert pass_at_k_unbiased(3, 1, 3) == 1.0
    assert pass_pow_k_unbiased(3, 2, 3) == 0.0
    assert pass_pow_k_unbiased(3, 3, 3) == 1.0


def test_unbiased_is_exact_for_large_counts():
    n, c, k = 200, 100, 50
    assert pass_at_k_unbiased(n, c, k) == float(1 - Fraction(comb(n - c, k), comb(n, k)))
    assert pass_pow_k_unbiased(n, c, k) == float(Fraction(comb(c, k), comb(n, k)))


def test_unbiased_differs_from_plug_in():
    # n = 4, c = 2, k = 2: unbiased 1 - C(2,2)/C(4,2) = 5/6; plug-in 1 - 0.5**2 = 3/4
    assert pass_at_k_unbiased(4, 2, 2) == 5 / 6
    assert pass_at_k(4, 2, 2) == 3 / 4
    # pass^2: unbiased C(2,2)/C(4,2) = 1/6; plug-in 0.5**2 = 1/4
    assert pass_pow_k_unbiased(4, 2, 2) == 1 / 6
    assert pass_pow_k(4, 2, 2) == 1 / 4


@pytest.mark.parametrize("function", [pass_at_k_unbiased, pass_pow_k_unbiased])
def test_unbiased_k_above_n_is_an_error(function):
    with pytest.raises(ValueError, match="k <= n"):
        function(3, 1, 4)


# --- validation ------------------------------------------------------------------------


@pytest.mark.parametrize("function", ALL)
@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (0, 0, 1, "n"),
        (-1, 0, 1, "n"),
        (3, -1, 1, "c"),
        (3, 4, 1, "c"),
        (3, 1, 0, "k"),
        (3, 1, -2, "k"),
        (3.0, 1, 1, "n must be an int"),
        (3, 1.0, 1, "c must be an int"),
        (3, 1, 1.0, "k must be an int"),
        (True, 1, 1, "n must be an int"),
        (3, True, 1, "c must be an int"),
        (3, 1, True, "k must be an int"),
    ],
)
def test_counts_are_validated(function, n, c, k, message):
    with pytest.raises(ValueError, match=message):
        function(n, c, k)
