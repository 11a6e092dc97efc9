"""The score histogram (`gen_ai.evaluation.score`), aggregated by spanscore, not per value by the SDK.

The OpenTelemetry SDK's histogram takes one value per call and cleans and hashes its
attributes on every one (about 16 us a value here): with a few scores per trace that was
a tenth of the collector's thread. Scores are bucketed where they are computed (a scoring
worker or the attach stage, `ScoreBuckets`), summed per series, and merged here once per
series and batch. What the metric readers collect is the same histogram data point the
SDK would build (same buckets, count, sum, min and max), added to spanscore's scope in
each collection, cumulative or delta as the reader prefers.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

Series = tuple[tuple[str, str | int | float | bool], ...]


@dataclass(slots=True)
class ScoreBuckets:
    """Scores of one series: a count per bucket (a value goes to the first bound it does
    not exceed, the last bucket takes the rest, as the SDK's), their count, sum, min, max."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(SCORE_BUCKETS) + 1))
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, value: float) -> None:
        self.counts[bisect_left(SCORE_BUCKETS, value)] += 1
        self.count += 1
        self.total += value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value

    def __reduce__(self):
        # Pickled as its fields, a third faster to read than the default for slots: a
        # scoring worker sends a batch of these every round.
        return (ScoreBuckets, (self.counts, self.count, self.total, self.low, self.high))

    def merge(self, other: ScoreBuckets) -> None:
        counts = self.counts
        for index, amount in enumerate(other.counts):
            counts[index] += amount
        self.count += other.count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)


@dataclass(slots=True)
class _Point:
    buckets: ScoreBuckets
    start_ns: int


class ScoreHistogram:
    """Series of bucketed scores, read by every metric reader it is attached to; thread-safe."""

    def __init__(self, name: str, unit: str, description: str, scope: InstrumentationScope, resource: Resource):
        self.name, self.unit, self.description = name, unit, description
        self.scope = scope
        self.resource = resource
        self._lock = threading.Lock()
        self._cumulative: dict[Series, _Point] = {}
        # Per reader preferring delta: what was recorded since its last collection.
        self._deltas: dict[int, dict[Series, _Point]] = {}
        self._delta_since: dict[int, int] = {}

    def record(self, attributes: Mapping[str, str | int | float | bool], buckets: ScoreBuckets) -> None:
        if not buckets.count:
            return
        series = tuple(sorted(attributes.items()))
        now = time.time_ns()
        with self._lock:
            for points in (self._cumulative, *self._deltas.values()):
                point = points.get(series)
                if point is None:
                    point = points[series] = _Point(ScoreBuckets(), now)
                point.buckets.merge(buckets)

    def attach(self, reader: MetricReader, before: Callable[[], None] | None = None) -> None:
        """Add the histogram to what `reader` collects, calling `before` first in each
        collection; call once the MeterProvider registered the reader (it sets the
        collection callback this wraps)."""
        collect = reader._collect  # the SDK's one hook between a reader and its provider
        if collect is None:
            raise RuntimeError("attach a reader once a MeterProvider has registered it")
        preferred = reader._instrument_class_temporality  # keyed by the SDK's own instrument classes
        delta = any(
            issubclass(kind, HistogramInstrument) and temporality == AggregationTemporality.DELTA
            for kind, temporality in preferred.items()
        )
        if delta:
            with self._lock:
                self._deltas[id(reader)] = {}
                self._delta_since[id(reader)] = time.time_ns()

        def collect_with_scores(metric_reader: MetricReader, **kwargs) -> MetricsData | None:
            if before is not None:
                before()
            # The SDK types its hook (reader, temporality) but calls it (reader, timeout_millis=...).
            collected = collect(metric_reader, **kwargs)  # pyright: ignore[reportCallIssue]
            return self._add_to(collected, id(reader) if delta else None)

        reader._set_collect_callback(collect_with_scores)  # pyright: ignore[reportArgumentType]  # as above

    def _add_to(self, data: MetricsData | None, delta_reader: int | None) -> MetricsData | None:
        metric = self._metric(delta_reader)
        if metric is None:
            return data
        scope_metrics = ScopeMetrics(self.scope, [metric], "")
        if data is None or not data.resource_metrics:
            return MetricsData([ResourceMetrics(self.resource, [scope_metrics], "")])
        first, *others = data.resource_metrics
        scopes = list(first.scope_metrics)
        for index, existing in enumerate(scopes):
            if existing.scope.name == self.scope.name:
                scopes[index] = ScopeMetrics(existing.scope, [*existing.metrics, metric], existing.schema_url)
                break
        else:
            scopes.append(scope_metrics)
        return MetricsData([ResourceMetrics(first.resource, scopes, first.schema_url), *others])

    def _metric(self, delta_reader: int | None) -> Metric | None:
        now = time.time_ns()
        with self._lock:
            if delta_reader is None:
                points, since = self._cumulative, None  # each point's own start
                temporality = AggregationTemporality.CUMULATIVE
            else:
                points, self._deltas[delta_reader] = self._deltas[delta_reader], {}
                since, self._delta_since[delta_reader] = self._delta_since[delta_reader], now
                temporality = AggregationTemporality.DELTA
            data_points = [
                HistogramDataPoint(
                    attributes=dict(series),
                    start_time_unix_nano=point.start_ns if since is None else since,
                    time_unix_nano=now,
                    count=point.buckets.count,
                    sum=point.buckets.total,
                    bucket_counts=list(point.buckets.counts),
                    explicit_bounds=list(SCORE_BUCKETS),
                    min=point.buckets.low,
                    max=point.buckets.high,
                )
                for series, point in points.items()
            ]
        if not data_points:
            return None
        return Metric(self.name, self.description, self.unit, Histogram(data_points, temporality))
