"""pass@k and pass^k over n tries of which c succeeded.

pass@k: the chance that at least one of k tries succeeds; pass^k: the chance that all
k do. Two estimators:

- plug-in (fair-forge's, as docs/eval-suites.md states it): p = c/n is taken as the success rate,
  pass@k = 1 - (1 - p)**k and pass^k = p**k. k may exceed n (k attempts of an agent
  whose success rate is estimated from n). Edge cases as the definition states them: c == 0
  → 0.0, c == n → 1.0, for both.
- unbiased (the HumanEval paper; agent_inspect's multi-sample module): the chance
  that k of the n tries drawn without replacement contain a success, pass@k =
  1 - C(n-c, k) / C(n, k), or are all successes, pass^k = C(c, k) / C(n, k). Needs
  k <= n. This is the one to use per case over n independent attempts.

Every function needs ints with n >= 1, 0 <= c <= n and k >= 1 (ValueError otherwise),
so the definition's `c >= n` guard only ever sees c == n.
"""

from __future__ import annotations

from collections.abc import Callable
from math import comb


def _check_int(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")


def _check_counts(n: int, c: int, k: int) -> None:
    for value, name in ((n, "n"), (c, "c"), (k, "k")):
        _check_int(value, name)
    if n < 1:
        raise ValueError(f"n (tries) must be >= 1, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c (successes) must be within [0, n={n}], got {c}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _check_k_within_n(n: int, k: int) -> None:
    if k > n:
        raise ValueError(f"the unbiased estimator needs k <= n: cannot draw k={k} of n={n} tries")


def _plug_in(n: int, c: int, k: int, statistic: Callable[[float], float]) -> float:
    """`statistic` of the rate p = c/n, with the definition's edge cases: c == 0 → 0.0, c == n → 1.0."""
    _check_counts(n, c, k)
    if c == 0:
        return 0.0
    if c >= n:
        return 1.0
    return statistic(c / n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Plug-in pass@k: c == 0 → 0.0; c == n → 1.0; else 1 - (1 - c/n)**k.

    >>> pass_at_k(10, 7, 3)  # 1 - 0.3**3 = 0.973
    0.973
    """
    return _plug_in(n, c, k, lambda p: 1.0 - (1.0 - p) ** k)


def pass_pow_k(n: int, c: int, k: int) -> float:
    """Plug-in pass^k: c == 0 → 0.0; c == n → 1.0; else (c/n)**k.

    >>> round(pass_pow_k(10, 7, 3), 12)  # 0.7**3
    0.343
    """
    return _plug_in(n, c, k, lambda p: p**k)


def pass_at_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k); k > n raises ValueError.

    Computed as (C(n, k) - C(n-c, k)) / C(n, k) on exact integers, one rounding in all.
    C(n-c, k) is 0 when fewer than k tries failed, so then pass@k = 1.

    >>> pass_at_k_unbiased(5, 2, 2)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    0.7
    """
    _check_counts(n, c, k)
    _check_k_within_n(n, k)
    total = comb(n, k)
    return (total - comb(n - c, k)) / total


def pass_pow_k_unbiased(n: int, c: int, k: int) -> float:
    """Unbiased pass^k = C(c, k) / C(n, k); k > n raises ValueError.

    C(c, k) is 0 when fewer than k tries succeeded, so then pass^k = 0.

    >>> pass_pow_k_unbiased(5, 3, 2)  # C(3,2)/C(5,2) = 3/10
    0.3
    """
    _check_counts(n, c, k)
    _check_k_within_n(n, k)
    return comb(c, k) / comb(n, k)


__all__ = ["pass_at_k", "pass_at_k_unbiased", "pass_pow_k", "pass_pow_k_unbiased"]
