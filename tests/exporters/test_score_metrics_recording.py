"""Observations are summed as they come and recorded when a reader collects: every reader
sees every observation, whenever it collects, and label caps hold across collections."""

from __future__ import annotations

import asyncio
import time

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from spanscore.core.result import MetricResult
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.exporters.score_observations import ScoreObservations


def observed(service: str, *scores: float) -> ScoreObservations:
    observations = ScoreObservations()
    results = [MetricResult(name="coherence", score=score) for score in scores]
    observations.add_results(results, service, "agent")
    return observations


def started(readers: list[InMemoryMetricReader], max_label_values: int = 200) -> ScoreMetrics:
    makers = [lambda host, reader=reader: reader for reader in readers]
    metrics = ScoreMetrics(makers, max_label_values=max_label_values)
    asyncio.run(metrics.start())
    return metrics


def points(reader: InMemoryMetricReader, name: str) -> dict[tuple[str, str], object]:
    """(service, label) -> data point of metric `name`, as the reader collects it now."""
    data = reader.get_metrics_data()
    found = {}
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        attributes = point.attributes
                        found[(attributes["service.name"], attributes["gen_ai.evaluation.score.label"])] = point
    return found


def test_each_reader_gets_every_observation_whenever_it_collects():
    early, late = InMemoryMetricReader(), InMemoryMetricReader()
    metrics = started([early, late])
    metrics.record_observations(observed("a", 0.9, 0.2))  # default threshold 0.5: a pass and a fail
    metrics.record_observations(observed("a", 0.7))
    counts = points(early, "gen_ai.evaluation.results")
    assert {key: point.value for key, point in counts.items()} == {("a", "pass"): 2, ("a", "fail"): 1}
    scores = points(early, "gen_ai.evaluation.score")
    assert (scores[("a", "pass")].count, scores[("a", "pass")].sum) == (2, 0.9 + 0.7)
    metrics.record_observations(observed("a", 0.1))
    # The reader that had not collected yet sees all four; the early one its total grown by one.
    for reader in (late, early):
        counts = points(reader, "gen_ai.evaluation.results")
        assert {key: point.value for key, point in counts.items()} == {("a", "pass"): 2, ("a", "fail"): 2}
        fail = points(reader, "gen_ai.evaluation.score")[("a", "fail")]
        assert (fail.count, fail.min, fail.max) == (2, 0.1, 0.2)
    asyncio.run(metrics.shutdown(time.monotonic() + 5))


def test_label_caps_keep_the_first_values_across_collections():
    reader = InMemoryMetricReader()
    metrics = started([reader], max_label_values=2)
    metrics.record_observations(observed("a", 0.9))
    metrics.record_observations(observed("b", 0.9))
    assert set(points(reader, "gen_ai.evaluation.results")) == {("a", "pass"), ("b", "pass")}
    metrics.record_observations(observed("c", 0.9))  # a third service: folded
    metrics.record_observations(observed("a", 0.8))  # a kept one stays
    counts = {key: point.value for key, point in points(reader, "gen_ai.evaluation.results").items()}
    assert counts == {("a", "pass"): 2, ("b", "pass"): 1, ("other", "pass"): 1}
    asyncio.run(metrics.shutdown(time.monotonic() + 5))


def test_what_comes_before_start_is_not_held():
    reader = InMemoryMetricReader()
    metrics = ScoreMetrics([lambda host: reader])
    metrics.record_observations(observed("a", 0.9))  # no provider yet: dropped
    asyncio.run(metrics.start())
    assert points(reader, "gen_ai.evaluation.results") == {}
    metrics.record_observations(observed("a", 0.9))
    assert points(reader, "gen_ai.evaluation.results")[("a", "pass")].value == 1
    asyncio.run(metrics.shutdown(time.monotonic() + 5))
