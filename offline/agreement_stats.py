"""Agreement statistics between a judge and people, with bootstrap intervals.

Every statistic here is a function of row weights: `weights` has one row per resample
and one column per compared item, holding how many times the resample drew that item
(the observed data is a single row of ones). So the estimate and every resample go
through the same arithmetic, vectorized over resamples.

Intervals are bootstrap intervals over traces: a resample draws as many traces as there
are, with replacement, and takes every compared item of each drawn trace (the items of
one trace are not independent: one trace, one judge call). The interval is BCa (bias-
corrected and accelerated, Efron 1987): the resamples' percentiles, moved for the
estimate's bias and skew, which a κ near its bounds has; plain percentiles undercover
there. Under MIN_TRACES_FOR_BCA traces the plain percentile interval is given instead.
The generator is numpy's PCG64 seeded by the caller, so the same input always gives the
same interval.

Definitions (n items, counts in a K x K table O of human class x judge class, margins r
and c):
- accuracy = trace(O) / n;
- Cohen's κ = 1 - Σ w·O / Σ w·E with E = r cᵀ / n and w = 1 - I; the weighted κ of an
  ordinal scale of K points takes w_ij = (i - j)² / (K - 1)² (quadratic weights);
  undefined (NaN) when Σ w·E is 0, i.e. both sides used one and the same class;
- precision, recall, F1 of the failing class: the judge's `fail` against the person's;
- Spearman's ρ: Pearson's correlation of mid-ranks (ties share their average rank);
- the best threshold: the judge score cut t (pass when score >= t) whose pass/fail
  verdicts have the highest κ with the people's, among the scores the judge gave.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
_CHUNK_CELLS = 4_000_000  # resample rows x items per chunk: bounds memory on large inputs
MAX_THRESHOLD_CANDIDATES = 200
MAX_JACKKNIFE_GROUPS = 500
# Below this many traces the resamples take few distinct values and BCa's corrections,
# estimated from them, swing wildly (an interval can shrink onto the estimate): plain
# percentiles are used instead.
MIN_TRACES_FOR_BCA = 20
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Estimate:
    """A statistic and its interval; NaN where undefined."""

    estimate: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float | None]:
        return {key: _finite_or_none(getattr(self, key)) for key in ("estimate", "low", "high")}


def _finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


Statistic = Callable[[np.ndarray], np.ndarray]  # weights (resamples x items) -> (resamples,)


class Bootstrap:
    """Resamples of traces, as item weights, shared by every statistic of one comparison.

    `clusters[i]` is the trace index of item i. The same seed gives the same resamples,
    whatever statistics are asked for and in which order.
    """

    def __init__(self, clusters: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED):
        self.clusters = np.asarray(clusters, dtype=np.int64)
        self.traces = int(self.clusters.max()) + 1 if self.clusters.size else 0
        self.resamples = resamples
        self.seed = seed
        self._one_item_per_trace = bool((self.clusters == np.arange(self.clusters.size)).all())

    def weight_chunks(self) -> Iterator[np.ndarray]:
        rng = np.random.Generator(np.random.PCG64(self.seed))
        per_chunk = max(1, _CHUNK_CELLS // max(1, self.traces + self.clusters.size))
        done = 0
        while done < self.resamples:
            size = min(per_chunk, self.resamples - done)
            drawn = rng.integers(0, self.traces, size=(size, self.traces))
            # Trace counts per resample: one bincount over offset indices for the chunk.
            drawn += np.arange(size)[:, None] * self.traces
            counts = np.bincount(drawn.ravel(), minlength=size * self.traces).reshape(size, self.traces)
            yield (counts if self._one_item_per_trace else counts[:, self.clusters]).astype(np.float64)
            done += size

    def jackknife_chunks(self) -> Iterator[np.ndarray]:
        """Item weights leaving out one group of traces at a time: each trace is its own
        group up to MAX_JACKKNIFE_GROUPS traces, beyond that traces are dealt into that
        many groups (a grouped jackknife; it only sets the interval's skew correction)."""
        groups = min(self.traces, MAX_JACKKNIFE_GROUPS)
        group_of_item = self.clusters % groups if groups else self.clusters
        per_chunk = max(1, _CHUNK_CELLS // max(1, self.clusters.size))
        for start in range(0, groups, per_chunk):
            left_out = np.arange(start, min(groups, start + per_chunk))
            yield (group_of_item[None, :] != left_out[:, None]).astype(np.float64)

    def estimate(self, statistic: Statistic) -> Estimate:
        return self.estimates(statistic)[0]

    def estimates(self, *statistics: Statistic) -> list[Estimate]:
        """Each statistic on the data and its BCa interval over the resamples."""
        observed = np.ones((1, self.clusters.size))
        points = [float(statistic(observed)[0]) for statistic in statistics]
        if self.traces < 2:
            return [Estimate(point, np.nan, np.nan) for point in points]
        draws: list[list[np.ndarray]] = [[] for _ in statistics]
        for weights in self.weight_chunks():
            for kept, statistic in zip(draws, statistics):
                kept.append(statistic(weights))
        leave_outs: list[list[np.ndarray]] = [[] for _ in statistics]
        for weights in self.jackknife_chunks() if self.traces >= MIN_TRACES_FOR_BCA else ():
            for kept, statistic in zip(leave_outs, statistics):
                kept.append(statistic(weights))
        if self.traces < MIN_TRACES_FOR_BCA:
            return [Estimate(p, *percentile_interval(np.concatenate(kept))) for p, kept in zip(points, draws)]
        return [
            Estimate(point, *bca_interval(point, np.concatenate(kept), np.concatenate(jack)))
            for point, kept, jack in zip(points, draws, leave_outs)
        ]


def bca_interval(point: float, draws: np.ndarray, jackknife: np.ndarray, confidence: float = CONFIDENCE):
    """Efron's bias-corrected and accelerated percentile interval: the percentiles are
    moved by the share of resamples below the estimate (bias) and by the jackknife's skew
    (acceleration). NaN when the statistic is undefined on the data; the plain percentile
    interval when the corrections are (every resample on one side, a constant jackknife)."""
    finite = draws[np.isfinite(draws)]
    if not np.isfinite(point) or finite.size == 0:
        return np.nan, np.nan
    below = (np.count_nonzero(finite < point) + 0.5 * np.count_nonzero(finite == point)) / finite.size
    jack = jackknife[np.isfinite(jackknife)]
    deviations = jack.mean() - jack if jack.size else np.zeros(1)
    spread = float((deviations**2).sum())
    acceleration = float((deviations**3).sum()) / (6.0 * spread**1.5) if spread > 0 else 0.0
    tail = (1.0 - confidence) / 2.0
    if not 0.0 < below < 1.0:
        return percentile_interval(finite, confidence)
    bias = _NORMAL.inv_cdf(below)
    shares = []
    for z in (_NORMAL.inv_cdf(tail), _NORMAL.inv_cdf(1.0 - tail)):
        shifted = bias + z
        shares.append(_NORMAL.cdf(bias + shifted / (1.0 - acceleration * shifted)))
    low, high = np.quantile(finite, shares)
    return float(low), float(high)


def percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central `confidence` share of the defined values; NaN when none is."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.nan, np.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return float(low), float(high)


# --- tables ----------------------------------------------------------------------------


def tables(weights: np.ndarray, human: np.ndarray, judge: np.ndarray, k: int) -> np.ndarray:
    """Weighted K x K tables (resamples x K x K) of items' (human class, judge class) indices."""
    cells = np.zeros((human.size, k * k))
    cells[np.arange(human.size), human * k + judge] = 1.0
    return (weights @ cells).reshape(-1, k, k)


def nominal_weights(k: int) -> np.ndarray:
    return 1.0 - np.eye(k)


def quadratic_weights(k: int) -> np.ndarray:
    points = np.arange(k, dtype=np.float64)
    return (points[:, None] - points[None, :]) ** 2 / max(1, k - 1) ** 2


def kappa(table: np.ndarray, disagreement: np.ndarray) -> np.ndarray:
    """κ of each table (… x K x K) under disagreement weights (K x K, zero diagonal)."""
    n = table.sum(axis=(-2, -1))
    expected = table.sum(axis=-1)[..., :, None] * table.sum(axis=-2)[..., None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = expected / n[..., None, None]
        observed_cost = (disagreement * table).sum(axis=(-2, -1))
        expected_cost = (disagreement * expected).sum(axis=(-2, -1))
        return np.where(expected_cost > 0, 1.0 - observed_cost / expected_cost, np.nan)


def accuracy(table: np.ndarray) -> np.ndarray:
    n = table.sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.trace(table, axis1=-2, axis2=-1) / n


def precision_recall_f1(table: np.ndarray, positive: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of the class at index `positive` (rows: human, columns: judge); NaN when undefined."""
    hit = table[..., positive, positive]
    judged = table[..., :, positive].sum(axis=-1)
    actual = table[..., positive, :].sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(judged > 0, hit / judged, np.nan)
        recall = np.where(actual > 0, hit / actual, np.nan)
        f1 = np.where(judged + actual > 0, 2.0 * hit / (judged + actual), np.nan)
    return precision, recall, f1


# --- rank correlation ------------------------------------------------------------------


class Ranks:
    """Mid-ranks of one variable under any item weights: ties share their average rank,
    and an item drawn m times counts as m tied items."""

    def __init__(self, values: np.ndarray):
        self.order = np.argsort(values, kind="stable")
        ordered = values[self.order]
        self.starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        self.group_of = np.empty(values.size, dtype=np.int64)
        self.group_of[self.order] = np.repeat(np.arange(self.starts.size), np.diff(np.r_[self.starts, values.size]))

    def of(self, weights: np.ndarray) -> np.ndarray:
        ordered = weights[:, self.order]
        group_weight = np.add.reduceat(ordered, self.starts, axis=1)
        group_end = np.cumsum(group_weight, axis=1)
        mid_rank = group_end - group_weight / 2.0 + 0.5
        return mid_rank[:, self.group_of]


def spearman(x: np.ndarray, y: np.ndarray) -> Statistic:
    """Spearman's ρ of x and y as a statistic of item weights."""
    rank_x, rank_y = Ranks(np.asarray(x, dtype=np.float64)), Ranks(np.asarray(y, dtype=np.float64))

    def statistic(weights: np.ndarray) -> np.ndarray:
        return weighted_pearson(rank_x.of(weights), rank_y.of(weights), weights)

    return statistic


def weighted_pearson(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    total = weights.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_x = (weights * x).sum(axis=1) / total
        mean_y = (weights * y).sum(axis=1) / total
        dx, dy = x - mean_x[:, None], y - mean_y[:, None]
        covariance = (weights * dx * dy).sum(axis=1)
        spread = np.sqrt((weights * dx * dx).sum(axis=1) * (weights * dy * dy).sum(axis=1))
        return np.where(spread > 0, covariance / spread, np.nan)


# --- thresholds ------------------------------------------------------------------------


def threshold_candidates(scores: np.ndarray) -> np.ndarray:
    """The distinct scores the judge gave (at most MAX_THRESHOLD_CANDIDATES quantiles of them)."""
    distinct = np.unique(scores)
    if distinct.size > MAX_THRESHOLD_CANDIDATES:
        distinct = np.unique(np.quantile(distinct, np.linspace(0.0, 1.0, MAX_THRESHOLD_CANDIDATES)))
    return distinct


def kappa_by_threshold(
    weights: np.ndarray, human_pass: np.ndarray, scores: np.ndarray, candidates: np.ndarray
) -> np.ndarray:
    """κ (resamples x candidates) between the people's pass/fail and `score >= t` for each t.

    Items are bucketed by how many candidates their score reaches (the judge passes an
    item at candidate j when its bucket is above j), so each resample costs one pass over
    its items rather than one per candidate."""
    buckets = np.searchsorted(candidates, scores, side="right")
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])

    def passing_at_each_candidate(item_weights: np.ndarray) -> np.ndarray:
        by_bucket = np.zeros((item_weights.shape[0], candidates.size + 1))
        by_bucket[:, ordered[starts]] = np.add.reduceat(item_weights[:, order], starts, axis=1)
        at_or_above = np.cumsum(by_bucket[:, ::-1], axis=1)[:, ::-1]
        return at_or_above[:, 1:]

    both_pass = passing_at_each_candidate(weights * human_pass)
    judge_pass_human_fail = passing_at_each_candidate(weights * ~human_pass)
    passes = (weights * human_pass).sum(axis=1)[:, None]
    fails = (weights * ~human_pass).sum(axis=1)[:, None]
    n = passes + fails
    both_fail = fails - judge_pass_human_fail
    judge_pass = both_pass + judge_pass_human_fail
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = (both_pass + both_fail) / n
        expected = (passes * judge_pass + fails * (n - judge_pass)) / (n * n)
        return np.where(expected < 1.0, (observed - expected) / (1.0 - expected), np.nan)


def best_threshold(human_pass: np.ndarray, scores: np.ndarray) -> Statistic:
    """The candidate threshold with the highest κ (the lowest such on ties), per resample."""
    candidates = threshold_candidates(scores)

    def statistic(weights: np.ndarray) -> np.ndarray:
        kappas = kappa_by_threshold(weights, human_pass, scores, candidates)
        defined = np.isfinite(kappas)
        best = np.argmax(np.where(defined, kappas, -np.inf), axis=1)
        return np.where(defined.any(axis=1), candidates[best], np.nan)

    return statistic
