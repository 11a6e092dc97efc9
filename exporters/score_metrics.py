"""Scores as OpenTelemetry metrics, for dashboards of score distributions and pass rates.

Every metric result becomes one observation of the histogram `gen_ai.evaluation.score`
(buckets of 0.1 over [0, 1]) and one increment of the counter
`gen_ai.evaluation.results`, both with `gen_ai.evaluation.name`,
`gen_ai.evaluation.score.label` (`pass`, `fail`, or `error` for a result without a
score), `eval.evaluator` and `eval.revision` (who scored it by which definition, so a
judge or rubric change starts new series), `service.name` (the agent's) and
`gen_ai.agent.name` when known, and for a span-level result (one about a span other
than the root) `eval.span.kind`, the kind of its span: `llm`, `tool`, `retrieval`,
`agent` or `span` (a handful of values, not one per span; the root's roll-up of the
metric is a trace result, without it); each label takes at most `max_label_values`
values per metric, later ones are `other`
(`label_limit`). Each finding about one span (a failure_localization blame) is one
increment of `gen_ai.evaluation.failures`, by `eval.failure.category`,
`eval.failure.group`, `service.name` and `gen_ai.agent.name`. A trace scored again
with late spans is not counted again: each result of a re-score is one increment of
`gen_ai.evaluation.rescores`, by the results counter's labels. They leave
through the exporters listed in `service.pipelines.metrics` (Prometheus scrape
endpoint, OTLP gRPC or HTTP) via the SDK's MeterProvider; the histogram is aggregated
by spanscore (`score_histogram`) and added to what each reader collects.

Observations are summed as they come and recorded into the instruments when a reader
collects (a scrape, an export interval, the flush at shutdown): the SDK's counters clean
and hash a label set on every call, so recording per batch cost as many calls as a
batch has series, a tenth of the collector's thread with scoring workers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, Counter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.telemetry import Reading, Readout
from spanscore.core.version import VERSION
from spanscore.exporters.label_limit import DEFAULT_MAX_LABEL_VALUES, LabelValueLimit
from spanscore.exporters.score_histogram import ScoreHistogram
from spanscore.exporters.score_observations import CALLS, FAILURES, RESCORES, RESULTS, ScoreObservations
from spanscore.exporters.sdk_parts import create_all

log = logging.getLogger("spanscore.exporters")

SCORE_HISTOGRAM = "gen_ai.evaluation.score"
RESULT_COUNTER = "gen_ai.evaluation.results"
FAILURE_COUNTER = "gen_ai.evaluation.failures"
RESCORE_COUNTER = "gen_ai.evaluation.rescores"
# Per evaluator (`judge`): gen_ai.evaluation.judge.calls, gen_ai.evaluation.judge.tokens.
USAGE_CALLS_COUNTER = "gen_ai.evaluation.{evaluator}.calls"
USAGE_TOKENS_COUNTER = "gen_ai.evaluation.{evaluator}.tokens"


class ScoreMetrics:
    """Records metric results; thread-safe (observations are summed under a lock; the SDK
    instruments are thread-safe).

    A component: `start()` builds the metric readers (a Prometheus reader opens its
    port then) and the MeterProvider; `shutdown(deadline)` exports what is pending and
    stops them. Recording before `start` or after `shutdown` is a no-op.
    """

    def __init__(
        self,
        readers: Sequence[Callable[[Host], MetricReader]],
        span_attributes: Sequence[str] = (),
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ):
        self._create_readers = list(readers)
        self.span_attributes = frozenset(span_attributes)
        self.label_limit = LabelValueLimit(max_label_values)
        self.observed: list[Readout] = []  # spanscore's own metrics, reported beside the scores
        self.provider: MeterProvider | None = None
        self._usage_counters: dict[str, tuple[Counter, Counter]] = {}
        self._pending = ScoreObservations()  # summed since the last collection
        self._pending_lock = threading.Lock()
        self._recording_lock = threading.Lock()  # readers collect from their own threads

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        readers = create_all(self._create_readers, host)
        resource = Resource.create({"service.name": "spanscore", "service.version": VERSION})
        self.provider = MeterProvider(metric_readers=readers, resource=resource)
        meter = self.provider.get_meter("spanscore", VERSION)
        self._scores = ScoreHistogram(
            SCORE_HISTOGRAM,
            "1",
            "Evaluation scores in [0, 1]",
            InstrumentationScope("spanscore", VERSION),
            resource,
        )
        for reader in readers:
            self._scores.attach(reader, before=self._record_pending)
        self._results = meter.create_counter(
            RESULT_COUNTER,
            unit="{result}",
            description="Evaluation results by label: pass, fail or error (a category for failure_localization)",
        )
        self._failures = meter.create_counter(
            FAILURE_COUNTER,
            unit="{failure}",
            description="Errors failure_localization blamed on a span, by category and group",
        )
        self._rescores = meter.create_counter(
            RESCORE_COUNTER,
            unit="{result}",
            description="Results of traces scored again with late spans, by label (not counted as results again)",
        )
        self._meter = meter
        for readout in self.observed:
            metric = readout.metric
            create = meter.create_observable_counter if metric.kind == "counter" else meter.create_observable_gauge
            create(metric.name, callbacks=[_observe(readout.read)], unit=metric.unit, description=metric.description)

    def observe(self, telemetry: Iterable[Readout]) -> None:
        """Report these of spanscore's own metrics beside the scores; call before `start`."""
        self.observed.extend(telemetry)

    def telemetry(self) -> list[Readout]:
        """Its own: the label values folded into `other`."""
        return self.label_limit.telemetry()

    def record_observations(self, observations: ScoreObservations) -> None:
        """Add to what the next collection records: each series once, its counter
        increments summed, its scores bucketed, labels past their cap as `other`."""
        if self.provider is None:
            return
        with self._pending_lock:
            self._pending.update(observations)

    def _record_pending(self) -> None:
        with self._recording_lock:
            with self._pending_lock:
                observations, self._pending = self._pending, ScoreObservations()
            self._record(observations)

    def _record(self, observations: ScoreObservations) -> None:
        limit = self.label_limit.apply
        for series, buckets in observations.scores.items():
            self._scores.record(limit(SCORE_HISTOGRAM, dict(series), buckets.count), buckets)
        for (counter, evaluator, series), amount in observations.counts.items():
            if counter == RESULTS:
                instrument, name = self._results, RESULT_COUNTER
            elif counter == FAILURES:
                instrument, name = self._failures, FAILURE_COUNTER
            elif counter == RESCORES:
                instrument, name = self._rescores, RESCORE_COUNTER
            elif evaluator is None:  # usage is counted by the evaluator that was paid
                raise ValueError(f"{counter} counted without an evaluator")
            elif counter == CALLS:
                instrument = self._usage_counters_for(evaluator)[0]
                name = USAGE_CALLS_COUNTER.format(evaluator=evaluator)
            else:
                instrument = self._usage_counters_for(evaluator)[1]
                name = USAGE_TOKENS_COUNTER.format(evaluator=evaluator)
            # Results and failures count one per recording; usage is one recording a batch.
            recordings = amount if counter in (RESULTS, FAILURES, RESCORES) else 1
            instrument.add(amount, limit(name, dict(series), recordings))

    def _usage_counters_for(self, evaluator: str) -> tuple[Counter, Counter]:
        counters = self._usage_counters.get(evaluator)
        if counters is None:
            counters = self._usage_counters[evaluator] = (
                self._meter.create_counter(
                    USAGE_CALLS_COUNTER.format(evaluator=evaluator),
                    unit="{request}",
                    description=f"Requests sent to the {evaluator} evaluator, retries included",
                ),
                self._meter.create_counter(
                    USAGE_TOKENS_COUNTER.format(evaluator=evaluator),
                    unit="{token}",
                    description=f"{evaluator} evaluator tokens by gen_ai.token.type (input, output)",
                ),
            )
        return counters

    async def shutdown(self, deadline: float) -> None:
        """Export what is pending by `deadline` and stop the readers."""
        provider, self.provider = self.provider, None
        if provider is not None:
            await asyncio.to_thread(_flush_and_stop, provider, deadline)


def _observe(read: Callable[[], Reading]) -> Callable[[CallbackOptions], list[Observation]]:
    def observe(options: CallbackOptions) -> list[Observation]:
        value = read()
        if value is None:
            return []
        if isinstance(value, list):
            return [Observation(v, attributes) for attributes, v in value]
        return [Observation(value)]

    return observe


def _flush_and_stop(provider: MeterProvider, deadline: float) -> None:
    """Export what is pending and stop the readers by `deadline`; a reader that cannot
    is named in one line (the SDK raises a bare Exception saying which)."""
    try:
        provider.force_flush(_millis_left(deadline))
    except Exception as exc:
        log.warning("score metrics not flushed at shutdown: %s", exc)
    try:
        provider.shutdown(_millis_left(deadline))
    except Exception as exc:
        log.warning("score metrics readers not stopped cleanly: %s", exc)


def _millis_left(deadline: float) -> float:
    # At least a millisecond: the SDK does not even try with none left.
    return max(1.0, (deadline - time.monotonic()) * 1000)
