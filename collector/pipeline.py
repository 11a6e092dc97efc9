"""Wires the traces pipeline: assembler -> processors -> score attacher -> exporters.

Receivers call `consume` with each parsed request. A timer releases ready traces from
the assembler; each is scored by the processors (traces of one session in order),
gets its scores attached, and is handed to every exporter. Only traces in the scoring
scope are scored (`assembler.score`: agent traces only by default); the others skip the
processors and sessions and are exported exactly as received. Sessions close after
`session_idle` without a new trace, or at shutdown, when session processors run and the
`evaluate_session` carrier span is exported.

Every received span counts as held until all exporters are done with it; when
`max_buffered_spans` are held, `consume` raises `ConsumerFull` and receivers tell the
client to retry later. Nothing is dropped silently: a span leaves through an exporter or
is logged as dropped by it (only when the backend refuses it for good or stays down
past the retry budget).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.collector.assembler import Assembler
from spanscore.collector.ready_queue import ReadyQueue
from spanscore.collector.score_scope import NOT_AGENT_TRACE, ScoreScope
from spanscore.collector.trace_scoring import LocalScoring, Scored
from spanscore.core.attributes import find_attribute
from spanscore.core.consumer import ConsumeOutcome, ConsumerFull
from spanscore.core.once import FirstSeen
from spanscore.core.provenance import Provenance
from spanscore.core.quoting import excerpt
from spanscore.core.routing import ROUTE_ATTRIBUTE, TraceRouter
from spanscore.core.session import Session, TraceSummary
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.trace_exporter import TraceExporter
from spanscore.core.version import VERSION
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.extensions.write_ahead_log import Replayed, WriteAheadLog
from spanscore.processors.agent_trace import agent_name_of
from spanscore.processors.attacher import attach_attributes, attach_results, attach_usage, session_carrier
from spanscore.processors.base import Processor

if TYPE_CHECKING:
    from spanscore.collector.scoring_workers import WorkerScoring

log = logging.getLogger("spanscore.pipeline")

MAX_TICK_S = 0.1
MIN_TICK_S = 0.005


class Pipeline:
    def __init__(
        self,
        assembler: Assembler,
        processors: list[tuple[str, Processor]],
        exporters: list[TraceExporter],
        clock: Callable[[], float] = time.monotonic,
        score_metrics: ScoreMetrics | None = None,
        span_events: bool = True,
        evaluation_logs: EvaluationLogs | None = None,
        workers: WorkerScoring | None = None,
        write_ahead: WriteAheadLog | None = None,
    ):
        self.assembler = assembler
        self.processors = processors  # those running in this process
        self.exporters = exporters
        self.clock = clock
        self.score_metrics = score_metrics
        self.span_events = span_events
        self.router = next((p for _, p in processors if isinstance(p, TraceRouter)), None)
        self.routed_out_traces = 0  # routed to no exporter by the router
        self.evaluation_logs = evaluation_logs
        self.provenance: dict[str, Provenance] = {}  # by metric name, once the processors started
        config = assembler.config
        self.max_held_spans = config.max_buffered_spans
        self.session_idle_s = config.session_idle
        self.max_open_sessions = config.max_open_sessions
        # Scoring runs here, or in worker processes (`scoring_workers`) that run the
        # same processors on copies of the traces and hand their outputs back.
        self.local = LocalScoring(processors, ScoreScope(config.score))
        self.workers = workers
        self.write_ahead = write_ahead
        self.replayed_spans = 0
        self._rescore_only: set[bytes] = set()  # replayed traces already exported: scored again, not sent
        self._scoring: LocalScoring | WorkerScoring = workers or self.local
        self.tracks_sessions = self._scoring.tracks_sessions
        self._unscored_services = FirstSeen()
        # Ready traces wait in a queue for scorers, which take them in batches of up to
        # `scoring_batch` (one trace per session at a time), at most `scoring_concurrency`
        # traces out at once: waiting costs no task per trace, and CPU-bound metrics
        # cannot keep the receivers and exporters that share the event loop waiting.
        self.scoring_concurrency = config.scoring_concurrency
        self._ready = ReadyQueue(config.scoring_batch, max_out=config.scoring_concurrency,
                                 ordered_sessions=self.tracks_sessions)
        self._workers: list[asyncio.Task] = []
        self.retry_after_s = max(1, math.ceil(config.trace_wait))
        self.held_spans = 0
        self.sessions: OrderedDict[str, Session] = OrderedDict()  # least recently active first
        self._tasks: set[asyncio.Task] = set()
        self._ticker: asyncio.Task | None = None
        self.received_spans = 0
        self.rejected_spans = 0
        self.refused_requests = 0  # turned away while full, for the client to retry
        self.exported_traces = 0
        self.unscored_traces = 0  # outside the scoring scope, forwarded as received
        self.evaluator_calls: Counter[str] = Counter()  # requests per evaluator ("judge")

    # Lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Start scoring and releasing; the processors and exporters are already started."""
        self.provenance = self._scoring.provenance()
        if self._scores:
            self._workers = [
                asyncio.create_task(self._score_forever(), name=f"scoring-{i}") for i in range(self.scoring_concurrency)
            ]
        self._ticker = asyncio.create_task(self._tick_forever(), name="pipeline-ticker")

    async def drain(self, deadline: float) -> None:
        """Release every buffered trace and close every session, handing all to the exporters.

        Called once receivers stopped; by `deadline` what could not be scored is handed
        over unscored. The exporters flush when they are shut down afterwards.
        """
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        for trace in self.assembler.pop_all():
            self._dispatch(trace)
        await self._drain_scoring(deadline)
        await self._wait_tasks(deadline)
        for session_id in list(self.sessions):
            self._close_session(session_id)
        await self._wait_tasks(deadline)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    async def settle(self) -> None:
        """Wait until every trace released so far is scored and handed to the exporters,
        and every closing session is done (for tests and embedders driving `tick`)."""
        if self._workers:
            await self._ready.join()
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def _drain_scoring(self, deadline: float) -> None:
        try:
            await asyncio.wait_for(self._ready.join(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            log.error("shutdown deadline passed with %d traces waiting to be scored; exporting them unscored",
                      len(self._ready))
            for worker in self._workers:
                worker.cancel()  # a cancelled scoring still exports its traces
            await asyncio.gather(*self._workers, return_exceptions=True)
            for trace in self._ready.take_all():
                self._export(trace)

    async def _wait_tasks(self, deadline: float) -> None:
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("shutdown deadline passed with %d traces or sessions still being scored", len(self._tasks))
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                return
            await asyncio.wait(list(self._tasks), timeout=remaining)

    # Input -----------------------------------------------------------------------------

    def check_capacity(self) -> None:
        """Raise ConsumerFull when at the span bound; receivers call it before parsing."""
        if self.held_spans >= self.max_held_spans:
            self.refused_requests += 1
            raise ConsumerFull(f"spanscore is holding {self.held_spans} spans, its limit; retry later",
                               self.retry_after_s)
        if self.write_ahead is not None and self.write_ahead.full:
            self.refused_requests += 1
            raise ConsumerFull(f"the write-ahead log holds {self.write_ahead.bytes_on_disk >> 20} MiB, its limit, "
                               "until exports catch up; retry later", self.retry_after_s)

    def consume(self, request: ExportTraceServiceRequest, data: bytes | None = None,
                write_ahead: bool = True) -> ConsumeOutcome:
        """Take a parsed request (called on the event loop); raises ConsumerFull."""
        self.check_capacity()
        wal = self.write_ahead if write_ahead else None
        record = None if wal is None else wal.next_sequence
        outcome = self.assembler.add(request, self.clock(), record)
        if wal is not None and outcome.accepted:
            wal.append(data if data is not None else request.SerializeToString(), outcome.accepted)
            outcome = replace(outcome, record=record)
        self.held_spans += outcome.accepted
        self.received_spans += outcome.accepted
        self.rejected_spans += outcome.rejected
        return outcome

    async def durable(self, outcome: ConsumeOutcome) -> None:
        if outcome.record is not None:
            await self.write_ahead.durable(outcome.record)

    def replay(self, requests: list[Replayed]) -> None:
        """Take back what the write-ahead log held at start, without the traces already exported."""
        wal = self.write_ahead
        now = self.clock()
        for replayed in requests:
            request = ExportTraceServiceRequest.FromString(replayed.data)
            if replayed.exported_traces:
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        keep = [s for s in scope_spans.spans if s.trace_id not in replayed.exported_traces]
                        if len(keep) < len(scope_spans.spans):
                            del scope_spans.spans[:]
                            scope_spans.spans.extend(keep)
            self._rescore_only |= replayed.rescore_traces
            outcome = self.assembler.add(request, now, replayed.sequence)
            wal.adopt(replayed.sequence, outcome.accepted)
            self.held_spans += outcome.accepted
            self.replayed_spans += outcome.accepted
        if requests:
            log.warning("replayed %d spans of %d requests from the write-ahead log", self.replayed_spans, len(requests))

    # Readiness -------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        wait_s = self.assembler.config.trace_wait
        while True:
            try:
                self.tick()
            except Exception:
                log.exception("pipeline tick failed")
            now = self.clock()
            deadline = self.assembler.next_deadline()
            sleep_s = MAX_TICK_S if deadline is None else deadline - now
            await asyncio.sleep(min(max(sleep_s, MIN_TICK_S), MAX_TICK_S, max(wait_s, MIN_TICK_S)))

    def tick(self) -> None:
        """Release ready traces and close idle sessions as of now."""
        now = self.clock()
        for trace in self.assembler.pop_ready(now):
            self._dispatch(trace)
        idle_before = now - self.session_idle_s
        while self.sessions:
            session_id, session = next(iter(self.sessions.items()))
            if session.last_activity > idle_before:
                break
            self._close_session(session_id)

    # Scoring ---------------------------------------------------------------------------

    def _dispatch(self, trace: Trace) -> None:
        if trace.late:
            self._export(trace)
            return
        trace.session_id = self.assembler.session_id_of(trace)
        if not self._scores:
            self._export(trace)
            return
        # Whether it is scored, and its session, are settled by a scorer: the scope may
        # need the normalized view, whose cost belongs off the release tick.
        self._ready.put(trace)

    def _session_for(self, trace: Trace) -> Session:
        session = self.sessions.get(trace.session_id)
        now = self.clock()
        if session is None:
            origin = trace.root_origin or next(iter(trace.spans_by_origin))
            resource = type(origin.resource)()
            resource.CopyFrom(origin.resource)
            session = Session(trace.session_id, resource, now)
            self.sessions[trace.session_id] = session
            if len(self.sessions) > self.max_open_sessions:
                oldest = next(iter(self.sessions))
                log.warning("more than %d open sessions: closing the least recently active (%s) early",
                            self.max_open_sessions, oldest)
                self._close_session(oldest)
        session.last_activity = now
        self.sessions.move_to_end(trace.session_id)
        return session

    async def _score_forever(self) -> None:
        ready = self._ready
        while True:
            batch = await ready.get_batch()
            try:
                await self._score_batch(batch)
            finally:
                ready.done(batch)
            # A processor that never suspends (an inline embedder) and a backlog in the
            # queue would otherwise keep the loop from the receivers, the exporters and
            # the ticker until the backlog is gone: clients time out, nothing leaves.
            await asyncio.sleep(0)

    @property
    def _scores(self) -> bool:
        return bool(self.processors) or self.workers is not None

    async def _score_batch(self, traces: list[Trace]) -> None:
        items: list[tuple[Trace, Session | None]] = []
        try:
            for trace in traces:
                if self.workers is None:
                    # Settled here, before a session is opened for it; workers settle it themselves.
                    skip = self.local.skip_reason(trace)
                    if skip is not None:
                        self._leave_unscored(trace, skip)
                        continue
                session = self._session_for(trace) if trace.session_id and self.tracks_sessions else None
                if session is not None:
                    session.scoring = True
                items.append((trace, session))
            scored_items = await self._scoring.score_batch(items) if items else []
            for (trace, session), scored in zip(items, scored_items):
                if scored.skip_reason is not None:
                    self._leave_unscored(trace, scored.skip_reason)
                    continue
                if session is not None:
                    trace.results = scored.results
                    session.traces.append(TraceSummary.of(trace))
                    trace.open_session = session
                self._attach(trace, scored)
        finally:
            for _, session in items:
                if session is not None:
                    session.scoring = False
                    if session.close_pending:
                        self._spawn(self._score_session(session))
            for trace in traces:
                # The views derived for the processors are not kept while exporting.
                trace.release_derived()
                # Scoring never holds a trace back: even a cancelled or crashed scoring exports it.
                self._export(trace)
                # The next trace of its session, held back until now, may be scored.
                self._ready.release(trace)

    def _leave_unscored(self, trace: Trace, reason: str) -> None:
        self.unscored_traces += 1
        service = trace.service_name
        if isinstance(service, str):  # the client's text: quoted, and remembered, cut short
            service = excerpt(service)
        if reason == NOT_AGENT_TRACE and self._unscored_services.first(service):
            log.info("service %r: a trace is %s; such traces are forwarded unscored (said once per service; "
                     "processors.assembler.score.agent_traces_only: false scores every trace)", service, reason)
        else:
            log.debug("trace %s forwarded unscored: %s", trace.trace_id_hex, reason)

    def _attach(self, trace: Trace, scored: Scored) -> None:
        results, usages, attributes = scored.results, scored.usages, scored.attributes
        for usage in usages:
            self.evaluator_calls[usage.evaluator] += usage.calls
        trace.results = results
        anchor = trace.anchor
        if anchor is not None:
            if results:
                attach_results(anchor, results, provenance=self.provenance, span_events=self.span_events)
                if self.evaluation_logs is not None:
                    self.evaluation_logs.emit(anchor, results)
            for usage in usages:
                attach_usage(anchor, usage)
            attach_attributes(anchor, attributes)
        if self.score_metrics is not None and (results or usages):
            service, agent = trace.service_name, agent_name_of(trace)
            if results:
                self.score_metrics.record(results, service, agent, attributes, self.provenance)
            for usage in usages:
                self.score_metrics.record_usage(usage, service, agent)

    def _close_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id)
        if not self.tracks_sessions:
            return
        if session.scoring:  # closes once the batch scoring its trace is done
            session.close_pending = True
        else:
            self._spawn(self._score_session(session))

    async def _score_session(self, session: Session) -> None:
        carrier = None
        try:
            carrier = await self._close_scored_session(session)
        finally:
            if self.write_ahead is not None and carrier is None:  # no carrier to wait for: settled now
                self._settle(session.unsettled)
        if carrier is not None:
            carrier.settles = session.unsettled
            self.held_spans += 1
            self._export(carrier)

    async def _close_scored_session(self, session: Session) -> Trace | None:
        """Run the session processors; the trace of the session's carrier span, or None
        when there is nothing to carry."""
        if not session.traces:  # none of its traces was scored: nothing to close on
            return None
        start_ns = time.time_ns()
        scored = await self._scoring.score_session(session)
        attributes, usages = scored.attributes, scored.usages
        for usage in usages:
            self.evaluator_calls[usage.evaluator] += usage.calls
        session.results.extend(scored.results)
        if not session.results:
            return None
        if self.score_metrics is not None:
            service = find_attribute(session.resource.attributes, "service.name")
            self.score_metrics.record(session.results, service, None, attributes, self.provenance)
            for usage in usages:
                self.score_metrics.record_usage(usage, service, None)
        resource_spans = session_carrier(session, start_ns, time.time_ns(), VERSION, self.provenance,
                                         self.span_events)
        scope_spans = resource_spans.scope_spans[0]
        span = scope_spans.spans[0]
        attach_attributes(span, attributes)
        if self.evaluation_logs is not None:
            self.evaluation_logs.emit(span, session.results)
        for usage in usages:
            attach_usage(span, usage)
        carrier = Trace(span.trace_id, self.clock())
        carrier.session_id = session.session_id
        carrier.results = session.results
        carrier.add(0, span, ScopeOrigin(resource_spans, scope_spans))
        return carrier

    # Output ----------------------------------------------------------------------------

    def _export(self, trace: Trace) -> None:
        if trace.trace_id in self._rescore_only:  # sent before a crash; scored again for its session only
            self._rescore_only.discard(trace.trace_id)
            self._exported(trace)
            return
        exporters = self.exporters
        if self.router is not None:
            route = self.router.route(trace.results, trace.trace_id)
            anchor = trace.anchor
            if route.matched and anchor is not None:
                attach_attributes(anchor, [SpanAttribute(ROUTE_ATTRIBUTE, ",".join(route.matched))])
            if route.exporters is not None:
                exporters = [e for e in exporters if e.id in route.exporters]
                if not exporters:
                    self.routed_out_traces += 1
        if not exporters:
            self._exported(trace)
            return
        trace.expect_exports(len(exporters), self._exported)
        for exporter in exporters:
            exporter.enqueue(trace)

    def _exported(self, trace: Trace) -> None:
        self.held_spans -= trace.span_count
        self.exported_traces += 1
        wal = self.write_ahead
        if wal is None or trace.undelivered:
            return
        if trace.settles is not None:  # a session's carrier is out: its traces are done with
            self._settle(trace.settles)
        session = trace.open_session
        # While its session is open, a trace stays in the log to rebuild the session after a crash.
        keep = session is not None and self.sessions.get(session.session_id) is session
        for origin, positions in trace.spans_by_origin.items():
            if origin.record is not None:
                if keep:
                    wal.exported(origin.record, trace.trace_id, len(positions))
                    session.unsettled.append((origin.record, trace.trace_id, len(positions)))
                else:
                    wal.done(origin.record, trace.trace_id, len(positions))

    def _settle(self, unsettled: list[tuple[int, bytes, int]]) -> None:
        for record, trace_id, spans in unsettled:
            self.write_ahead.done(record, trace_id, spans)
        unsettled.clear()

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scoring task failed", exc_info=task.exception())
