"""The running collector: builds components from a Config, starts them, stops them cleanly.

Every component has one lifecycle, `start(host)` then `shutdown(deadline)`; the host is
how components find the running extensions (authenticators, storage). Start order:
extensions, the score metrics, processors, exporters, then the pipeline's workers and
receivers last, so nothing is accepted before it can be handled. Shutdown reverses it:
receivers stop accepting, buffered traces and sessions are pushed through processors to
the exporters, exporters flush, all within `service.shutdown_timeout`. Scoring stops
`shutdown_export_reserve` before its end, what it did not finish leaves unscored, and
the exporters have the reserve. When a start fails, every component is shut down
(shutdown is safe without start).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from spanscore.collector.self_telemetry import self_telemetry
from spanscore.config.loader import Config
from spanscore.core.component import Component, Host, PipelineWatcher
from spanscore.core.durations import format_duration
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.extensions.file_storage import FileStorage
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.gc_tuning import collect_cycles_forever, tune_for_collector
from spanscore.pipeline.scoring_workers import WorkerScoring, WorkerSetup
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.budget import BudgetWindow

log = logging.getLogger("spanscore")

FAILED_START_SHUTDOWN_S = 1.0


class Service:
    def __init__(self, config: Config):
        self.config = config
        # Extensions first: every other component finds them through the host at start.
        self.extensions = [c.factory.build(c.id, c.config) for c in config.extensions]
        self.host = Host(dict(zip((c.id for c in config.extensions), self.extensions)))
        # Listed in service.extensions, file_storage turns on the write-ahead log.
        self.storage = next((e for e in self.extensions if isinstance(e, FileStorage)), None)
        self.assembler = Assembler(config.pipeline_settings)
        processors = [(c.id, c.factory.build(c.id, c.config)) for c in config.processors]
        exporters = [c.factory.build(c.id, c.config) for c in config.exporters]
        # Workers encode the traces they score when every exporter sends those bytes as
        # they are (the score router writes `eval.route` on the spans at fan-out).
        encode_traces = config.router is None and all(getattr(e, "sends_protobuf", False) for e in exporters)
        self.workers = _workers(config, processors, encode_traces)
        if self.workers is not None:  # they run in the workers
            processors = []
        self.router = config.router.factory.build(config.router.id, config.router.config) if config.router else None
        self.score_metrics: ScoreMetrics | None = None
        metrics = config.service.pipelines.metrics  # the metric exporters are what it lists
        if metrics is not None and config.metric_exporters:
            self.score_metrics = ScoreMetrics(
                [
                    _reader(c.factory.create_metric_reader, c.id, c.config, metrics.export_interval)
                    for c in config.metric_exporters
                ],
                metrics.span_attributes,
                metrics.max_label_values,
            )
        self.evaluation_logs: EvaluationLogs | None = None
        if config.log_exporters:
            self.evaluation_logs = EvaluationLogs([_log_exporter(c) for c in config.log_exporters])
        self.pipeline = Pipeline(
            self.assembler,
            processors,
            exporters,
            score_metrics=self.score_metrics,
            span_events=config.service.pipelines.traces.span_events,
            evaluation_logs=self.evaluation_logs,
            workers=self.workers,
            write_ahead=self.storage.log if self.storage is not None else None,
            router=self.router,
        )
        self.memory_limiter = None  # between the receivers and the pipeline, when configured
        if config.memory_limiter is not None:
            limiter = config.memory_limiter
            self.memory_limiter = limiter.factory.build(limiter.id, limiter.config, self.pipeline.intake)
        intake = self.memory_limiter or self.pipeline.intake
        self.receivers = [c.factory.build(c.id, c.config, intake) for c in config.receivers]
        if self.score_metrics is not None:
            self.score_metrics.observe(self_telemetry(self._components()))

    @property
    def processors(self) -> list[Component]:
        local: list[Component] = [processor for _, processor in self.pipeline.processors]
        scoring = local if self.workers is None else [*local, self.workers]
        return scoring if self.router is None else [*scoring, self.router]

    @property
    def exporters(self) -> list[Component]:
        return list(self.pipeline.exporters)

    async def start(self) -> None:
        try:
            for component in self._before_receivers():
                await component.start(self.host)
            await self.pipeline.start()
            if self.storage is not None:  # what was acknowledged before the last stop, before anything new
                self.pipeline.intake.replay(self.storage.replay)
                self.storage.replay = []
                self.pipeline.restore_late(self.storage.kept_copies)
                self.storage.kept_copies = []
                self.pipeline.restore_pending(self.storage.pending_copies)
                self.storage.pending_copies = []
            for receiver in self.receivers:
                await receiver.start(self.host)
        except BaseException:
            deadline = time.monotonic() + FAILED_START_SHUTDOWN_S
            await self.pipeline.drain(deadline)
            await _shut_down([*self.receivers, *reversed(self._before_receivers())], deadline)
            raise
        for watcher in self._watchers():
            watcher.pipeline_ready()
        log.info("spanscore running: %s", self.config.summary())
        if self.pipeline.scoring is None:
            log.info("no scoring processors in the pipeline: traces are assembled and forwarded without scores")

    async def shutdown(self) -> None:
        """Stop accepting, score what is held until the scoring deadline, then export it
        all, scored or not, by the shutdown deadline: the exporters' reserve is theirs."""
        service = self.config.service
        started = time.monotonic()
        deadline = started + service.shutdown_timeout
        scoring_s = service.shutdown_timeout - service.export_reserve
        scoring_deadline = started + scoring_s
        for watcher in self._watchers():
            watcher.pipeline_not_ready()
        await _shut_down_together(self.receivers, scoring_deadline)
        await _shut_down(self._guards(), scoring_deadline)
        why = (
            f"spanscore stopped before scoring it: scoring gets {format_duration(scoring_s)} of shutdown_timeout, "
            f"export the last {format_duration(service.export_reserve)} (shutdown_export_reserve)"
        )
        await self.pipeline.drain(scoring_deadline, why)
        # Together: an exporter retrying a backend that is down leaves the others their time.
        await _shut_down_together([*self.exporters, *self.processors], deadline)
        await _shut_down([c for c in (self.score_metrics, self.evaluation_logs) if c is not None], deadline)
        await _shut_down(self.extensions, deadline)
        dropped = sum(e.dropped_spans for e in self.pipeline.exporters)
        kept = sum(e.kept_spans for e in self.pipeline.exporters)
        counts = self.pipeline.counts
        log.info(
            "spanscore stopped: received %d spans, rejected %d, exported %d traces, exporters dropped %d spans%s",
            counts.received_spans,
            counts.rejected_spans,
            counts.exported_traces,
            dropped,
            f" and left {kept} in the write-ahead log for the next start" if kept else "",
        )

    def _components(self) -> list[object]:
        """Every component, the pipeline's through it: those that report telemetry say so."""
        telemetry = [c for c in (self.score_metrics, self.evaluation_logs) if c is not None]
        return [*self.extensions, *telemetry, self.pipeline, *self._guards(), *self.receivers]

    def _before_receivers(self) -> list[Component]:
        telemetry = [c for c in (self.score_metrics, self.evaluation_logs) if c is not None]
        return [*self.extensions, *telemetry, *self.processors, *self.exporters, *self._guards()]

    def _guards(self) -> list[Component]:
        return [self.memory_limiter] if self.memory_limiter is not None else []

    def _watchers(self) -> list[PipelineWatcher]:
        return [e for e in self.extensions if isinstance(e, PipelineWatcher)]


async def _shut_down(components: Iterable[Component], deadline: float) -> None:
    """Shut each down in order; one failing does not keep the others running."""
    for component in components:
        try:
            await component.shutdown(deadline)
        except Exception:
            log.exception("%s failed to shut down", getattr(component, "id", type(component).__name__))


async def _shut_down_together(components: Iterable[Component], deadline: float) -> None:
    """Shut them down at once, each by `deadline`: a slow one does not eat the others' time."""
    await asyncio.gather(*(_shut_down([component], deadline) for component in components))


def _workers(config: Config, processors: list, encode_traces: bool) -> WorkerScoring | None:
    count = config.pipeline_settings.scoring_workers
    if count == 0 or not processors:
        return None
    scoring = list(zip(config.processors, (p for _, p in processors)))
    # A judge's hourly budget is one budget, however many workers call the judge; every
    # processor that calls judges gets a window (and so reports its judges' telemetry).
    windows = {c.id: BudgetWindow(shared=True) for c, p in scoring if isinstance(p, UsesJudges)}
    metrics = config.service.pipelines.metrics
    setup = WorkerSetup(
        [(c.id, c.factory, c.config) for c, _ in scoring],
        config.pipeline_settings.score,
        logging.getLogger("spanscore").getEffectiveLevel(),
        windows,
        span_events=config.service.pipelines.traces.span_events,
        score_labels=frozenset(metrics.span_attributes) if metrics is not None and config.metric_exporters else None,
        encode_traces=encode_traces,
        # Evaluation logs, the router and exporters that build requests read the results.
        send_results=not encode_traces or bool(config.log_exporters),
    )
    return WorkerScoring(
        setup,
        count,
        tuple(n for _, p in scoring for n in p.trace_metric_names),
        tuple(n for _, p in scoring for n in p.session_metric_names),
        any(p.uses_sessions for _, p in scoring),
    )


def _reader(create, component_id: str, config, interval_s: float):
    return lambda host: create(component_id, config, interval_s, host)


def _log_exporter(component):
    return lambda host: component.factory.create_log_exporter(component.id, component.config, host)


async def run_until_signalled(service: Service, stop: asyncio.Event) -> None:
    await service.start()
    tune_for_collector()
    sweeper = asyncio.create_task(collect_cycles_forever(), name="gc-full-passes")
    try:
        await stop.wait()
    finally:
        sweeper.cancel()
        await service.shutdown()
