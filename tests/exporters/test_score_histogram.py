"""The score histogram spanscore aggregates: bucketed as the SDK would, read by any reader."""

from __future__ import annotations

import pickle

import pytest
from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from spanscore.exporters.score_histogram import SCORE_BUCKETS, ScoreBuckets, ScoreHistogram
from spanscore.exporters.score_observations import ScoreObservations

# On the bounds and between them, 0 and 1 (scores are within [0, 1]).
VALUES = [0.0, 0.1, 0.1000001, 0.25, 0.5, 0.5, 0.95, 1.0]
ATTRIBUTES = {"gen_ai.evaluation.name": "coherence", "gen_ai.evaluation.score.label": "pass"}


def buckets_of(values) -> ScoreBuckets:
    buckets = ScoreBuckets()
    for value in values:
        buckets.add(value)
    return buckets


def test_buckets_match_hand_counts():
    buckets = buckets_of(VALUES)
    # (-inf, 0.1] holds 0.0 and 0.1; (0.1, 0.2] 0.1000001; (0.2, 0.3] 0.25; (0.4, 0.5] both
    # 0.5s; (0.9, 1.0] 0.95 and 1.0; nothing above 1.
    assert buckets.counts == [2, 1, 1, 0, 2, 0, 0, 0, 0, 2, 0]
    assert (buckets.count, buckets.low, buckets.high) == (8, 0.0, 1.0)
    assert buckets.total == pytest.approx(3.4000001)


def test_buckets_cross_a_pickle_whole():
    # As scoring workers send them: the filled and the empty (min and max still infinite).
    for buckets in (buckets_of(VALUES), ScoreBuckets()):
        copy = pickle.loads(pickle.dumps(buckets))
        assert copy == buckets and copy is not buckets
        copy.add(0.5)  # its own counts, not the original's
        assert (copy.count, sum(copy.counts)) == (buckets.count + 1, sum(buckets.counts) + 1)


def test_merged_halves_equal_the_whole():
    half = buckets_of(VALUES[:4])
    half.merge(buckets_of(VALUES[4:]))
    whole = buckets_of(VALUES)
    assert (half.counts, half.count, half.low, half.high) == (whole.counts, whole.count, whole.low, whole.high)
    assert half.total == pytest.approx(whole.total)
    empty = ScoreBuckets()
    empty.merge(ScoreBuckets())
    assert (empty.count, empty.counts) == (0, [0] * (len(SCORE_BUCKETS) + 1))


def sdk_point(values):
    """The data point the SDK's own histogram builds from the same values."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    histogram = provider.get_meter("sdk").create_histogram("h", explicit_bucket_boundaries_advisory=SCORE_BUCKETS)
    for value in values:
        histogram.record(value, ATTRIBUTES)
    (point,) = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    return point


def ours(temporality: AggregationTemporality = AggregationTemporality.CUMULATIVE):
    reader = InMemoryMetricReader(preferred_temporality={HistogramInstrument: temporality})
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("spanscore", "1.0")
    meter.create_counter("other").add(1)  # the scope already has a metric: the histogram joins it
    histogram = ScoreHistogram(
        "gen_ai.evaluation.score", "1", "scores", InstrumentationScope("spanscore", "1.0"), Resource.create({})
    )
    histogram.attach(reader)
    return reader, histogram


def collected(reader):
    data = reader.get_metrics_data()
    (scope,) = data.resource_metrics[0].scope_metrics
    return {metric.name: metric for metric in scope.metrics}


def test_what_a_reader_collects_is_the_sdks_data_point():
    reader, histogram = ours()
    observations = ScoreObservations()
    for value in VALUES:  # as a worker would: one series, bucketed as scored
        observations.scores.setdefault(tuple(sorted(ATTRIBUTES.items())), ScoreBuckets()).add(value)
    for series, buckets in observations.scores.items():
        histogram.record(dict(series), buckets)
    metrics = collected(reader)
    assert set(metrics) == {"other", "gen_ai.evaluation.score"}
    metric = metrics["gen_ai.evaluation.score"]
    assert (metric.unit, metric.description) == ("1", "scores")
    assert metric.data.aggregation_temporality == AggregationTemporality.CUMULATIVE
    (point,) = metric.data.data_points
    expected = sdk_point(VALUES)
    assert dict(point.attributes) == ATTRIBUTES
    assert list(point.bucket_counts) == list(expected.bucket_counts)
    assert list(point.explicit_bounds) == list(expected.explicit_bounds)
    assert (point.count, point.min, point.max) == (expected.count, expected.min, expected.max)
    assert point.sum == pytest.approx(expected.sum)


def test_cumulative_keeps_counting_and_delta_starts_over():
    cumulative, total = ours()
    delta, recent = ours(AggregationTemporality.DELTA)
    for histogram in (total, recent):
        histogram.record(ATTRIBUTES, buckets_of([0.5, 1.0]))
    first = collected(delta)["gen_ai.evaluation.score"].data
    assert first.aggregation_temporality == AggregationTemporality.DELTA
    assert first.data_points[0].count == 2
    assert collected(cumulative)["gen_ai.evaluation.score"].data.data_points[0].count == 2
    for histogram in (total, recent):
        histogram.record(ATTRIBUTES, buckets_of([0.05]))
    (second,) = collected(delta)["gen_ai.evaluation.score"].data.data_points
    assert (second.count, second.min, second.max, second.bucket_counts[0]) == (1, 0.05, 0.05, 1)
    assert second.start_time_unix_nano >= first.data_points[0].time_unix_nano
    (grown,) = collected(cumulative)["gen_ai.evaluation.score"].data.data_points
    assert (grown.count, grown.min, grown.max) == (3, 0.05, 1.0)
    # Nothing new since: a delta reader reports no histogram, a cumulative one the same.
    assert "gen_ai.evaluation.score" not in collected(delta)
    assert collected(cumulative)["gen_ai.evaluation.score"].data.data_points[0].count == 3


def test_a_provider_with_no_other_metric_still_reports_the_histogram():
    reader = InMemoryMetricReader()
    MeterProvider(metric_readers=[reader])
    histogram = ScoreHistogram("s", "1", "d", InstrumentationScope("spanscore", "1.0"), Resource.create({"k": "v"}))
    histogram.attach(reader)
    assert reader.get_metrics_data() is None  # nothing recorded, nothing to report
    histogram.record(ATTRIBUTES, ScoreBuckets())  # an empty series adds nothing
    assert reader.get_metrics_data() is None
    histogram.record({"a": "1"}, buckets_of([0.3]))
    histogram.record({"a": "2"}, buckets_of([0.7, 0.8]))
    data = reader.get_metrics_data()
    assert data.resource_metrics[0].resource.attributes["k"] == "v"
    points = data.resource_metrics[0].scope_metrics[0].metrics[0].data.data_points
    assert sorted((dict(p.attributes)["a"], p.count) for p in points) == [("1", 1), ("2", 2)]
