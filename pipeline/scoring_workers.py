"""`scoring_workers: N`: the processors run in N worker processes, so scoring uses N cores.

The collector process keeps receiving, assembling, merging scores and exporting; each
ready trace goes to a worker as its spans' protobuf bytes (not Python objects, and only
the spans of that trace with their resource and scope), and the worker's processors'
outputs come back as `Scored`, with what the collector's thread would otherwise compute
per trace done in the worker (`PreparedScores`): the scores encoded as the span field
bytes the collector merges, a closed session's carrier span built, and the score
metrics' observations summed per round. A batch's traces for a worker go as one message,
with one future for its answers; messages and answers are pickled in batches, one per
round of each process's event loop.

A session's traces all go to one worker (by a hash of the session id), where its
processors keep their per-session state; the pipeline's ready queue holds a session's
next trace back while one of its traces is out, so a session's traces are scored in
order, and what a worker gets in one round (one trace per session) it scores as one
batch. A trace without a session goes to a worker by its trace id.

A worker that dies (killed, out of memory) costs the traces it held their scores, not
the traces: each gets an error result per metric saying so and is exported. The worker
is started again; the sessions it held start over there.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import queue
import signal
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from spanscore.core.attributes import find_attribute
from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.session import Session, TraceSummary
from spanscore.core.telemetry import Readout, TelemetryMetric
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import per_evaluator
from spanscore.core.version import VERSION
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.encoded_trace import Origins, encoded_trace
from spanscore.pipeline.gc_tuning import tune_for_collector
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_attributes import carrier_spans, finding_fields, prepared_anchor
from spanscore.pipeline.score_scope import ScoreScope, ScoreScopeConfig
from spanscore.pipeline.scoring import LocalScoring, Scored, SessionOf, scope_skip_reason, unscored_in_scope
from spanscore.processors.agent_trace import agent_name_of
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.budget import BudgetWindow
from spanscore.processors.judge_metrics.telemetry import (
    REPORT_INTERVAL_S,
    JudgeTelemetry,
    judge_readouts,
    judge_telemetry,
    spent,
)

log = logging.getLogger("spanscore.scoring_workers")

READY_TIMEOUT_S = 120.0  # imports and processor start in a fresh interpreter
_STOP = ("stop",)


class WorkerLost(RuntimeError):
    """The worker process scoring a trace exited before answering."""


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process needs to build the same processors as the collector."""

    processors: list[tuple[str, ComponentFactory, ComponentConfig]]
    scope: ScoreScopeConfig
    log_level: int
    # Per processor that calls judges: the hourly budget window its judges share with the
    # same processor's judges in the other workers (one judge per processor, as built in).
    budget_windows: dict[str, BudgetWindow] = field(default_factory=dict)
    span_events: bool = True  # the traces pipeline's: results as span events too
    # With score metrics configured: the processors' attributes that become labels.
    score_labels: frozenset[str] | None = None
    # Every exporter of the traces pipeline sends protobuf: a scored trace comes back
    # encoded with its scores (encoded_trace), and the collector sends those bytes.
    encode_traces: bool = False
    # The collector reads a scored trace's results and findings (a score router,
    # evaluation logs, an exporter that is not OTLP protobuf); without, an encoded
    # trace's answer carries only its scores by name, for the session's summary, and a
    # session's only its carrier.
    send_results: bool = True


IN_FLIGHT = TelemetryMetric(
    "spanscore_scoring_workers_in_flight", "{trace}", "Traces and sessions out with a scoring worker", "gauge"
)
RESTARTS = TelemetryMetric(
    "spanscore_scoring_workers_restarts",
    "{process}",
    "Scoring worker processes started again after they exited",
    "counter",
)


class WorkerScoring:
    """The scoring stage in worker processes: a `Scoring`, as `LocalScoring` is."""

    def __init__(
        self,
        setup: WorkerSetup,
        count: int,
        trace_metric_names: tuple[str, ...],
        session_metric_names: tuple[str, ...],
        tracks_sessions: bool,
    ):
        if count < 1:
            raise ValueError("scoring_workers must be at least 1")
        self.id = "scoring_workers"
        self.setup = setup
        self.count = count
        self.trace_metric_names = trace_metric_names
        self.session_metric_names = session_metric_names
        self.metric_names = (*trace_metric_names, *session_metric_names)
        self.tracks_sessions = tracks_sessions
        self._scope = ScoreScope(setup.scope)  # here only for the traces a shutdown leaves unscored
        self._retired = JudgeTelemetry()  # what the judges of workers that exited spent
        self._workers: list[_WorkerHandle] = []
        self._provenance: dict[str, Provenance] = {}
        self._stopping = False
        self.restarts = 0
        # Where the score metrics the workers observed go (the attach stage's `observe`).
        self.on_observations: Callable[[ScoreObservations], None] | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        loop = asyncio.get_running_loop()
        self._workers = [_WorkerHandle(i, self.setup, loop, self._lost, self._observed) for i in range(self.count)]
        ready = await asyncio.gather(*(w.ready for w in self._workers), return_exceptions=True)
        problems = [str(r) for r in ready if isinstance(r, BaseException)]
        if problems:
            raise RuntimeError(f"scoring workers failed to start: {problems[0]}")
        self._provenance = ready[0]
        log.info("scoring in %d worker processes (pids %s)", self.count, ", ".join(str(w.pid) for w in self._workers))

    def provenance(self) -> dict[str, Provenance]:
        return dict(self._provenance)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    @property
    def uses_judges(self) -> bool:
        """The workers' processors call judges (each has a budget window): they report telemetry."""
        return bool(self.setup.budget_windows)

    def judge_telemetry(self) -> list[JudgeTelemetry]:
        """Every worker's judges as it last reported them, and what exited workers spent."""
        return [self._retired, *(telemetry for worker in self._workers for telemetry in worker.judge_telemetry)]

    @property
    def in_flight(self) -> int:
        """Traces and sessions sent to a worker and not answered yet."""
        return sum(items for w in self._workers for _, items in w.pending.values())

    def telemetry(self) -> list[Readout]:
        """Its workers' judges (as they last reported), the traces out with them, their restarts."""
        judges = judge_readouts(self.judge_telemetry) if self.uses_judges else []
        return [*judges, IN_FLIGHT.reads(lambda: self.in_flight), RESTARTS.reads(lambda: self.restarts)]

    async def score_batch(self, traces: Sequence[Trace], session_of: SessionOf) -> list[Scored]:
        # Each worker gets the batch's traces for it as one message, sent with the loop
        # round's others, and scores those it gets in a round as one batch. Workers decide
        # the scope: a session is opened here for every trace that names one, and stays
        # empty if none of its traces is scored.
        sessions = [session_of(trace) for trace in traces]
        # One future per worker, not per trace: the collector's thread is the ceiling.
        positions: dict[int, list[int]] = {}
        for position, (trace, session) in enumerate(zip(traces, sessions)):
            key = session.session_id.encode("utf-8") if session is not None else trace.trace_id
            positions.setdefault(zlib.crc32(key) % len(self._workers), []).append(position)
        asked = []
        for index, at in positions.items():
            # A trace outside the sessions (none opened for it) goes without its session id.
            items = [
                (traces[p].trace_id, traces[p].session_id if sessions[p] is not None else None, _origins_of(traces[p]))
                for p in at
            ]
            asked.append(self._workers[index].submit(("traces", items), len(items)))
        answers: list[Scored] = [None] * len(traces)  # type: ignore[list-item]  # each set below
        for at, answer in zip(positions.values(), await asyncio.gather(*asked, return_exceptions=True)):
            if isinstance(answer, WorkerLost):
                answer = [Scored.failed(self.metric_names, answer) for _ in at]
            elif isinstance(answer, BaseException):  # not the worker's failure: the pipeline's to handle
                raise answer
            for position, scored in zip(at, answer):
                answers[position] = scored
        for trace, session, scored in zip(traces, sessions, answers):
            if session is not None and scored.skip_reason is None:
                trace.results = scored.results
                prepared = scored.prepared
                session.traces.append(TraceSummary.of(trace, prepared.scores if prepared is not None else None))
        return answers

    def left_unscored(self, trace: Trace, session_of: SessionOf, why: str) -> Scored:
        skip = scope_skip_reason(self._scope, trace)
        return unscored_in_scope(skip, trace, session_of, self.trace_metric_names, why)

    async def score_session(self, session: Session) -> Scored:
        worker = self._workers[zlib.crc32(session.session_id.encode("utf-8")) % len(self._workers)]
        # The carrier links the traces this process scored in the session (a worker that
        # restarted knows fewer).
        links = [(t.trace_id, t.anchor_span_id) for t in session.traces]
        try:
            return await worker.ask(("session", session.session_id, links))
        except WorkerLost as exc:
            return Scored.failed(self.metric_names, exc)

    def _observed(self, observations: ScoreObservations) -> None:
        if self.on_observations is not None:
            self.on_observations(observations)

    def _lost(self, handle: _WorkerHandle) -> None:
        self._retired = spent([self._retired, *handle.judge_telemetry])
        handle.judge_telemetry = []
        if self._stopping:
            return
        if handle.ready.exception() is not None:  # it never started: another would fail the same way
            log.error(
                "scoring worker %d exited before it was ready; its traces are exported with an error result",
                handle.index,
            )
            return
        self.restarts += 1
        log.error(
            "scoring worker %d (pid %s) exited with code %s; starting it again",
            handle.index,
            handle.pid,
            handle.exitcode,
        )
        self._workers[handle.index] = _WorkerHandle(
            handle.index, self.setup, asyncio.get_running_loop(), self._lost, self._observed
        )

    async def shutdown(self, deadline: float) -> None:
        self._stopping = True
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            await worker.join(deadline)


def _origins_of(trace: Trace) -> Origins:
    """The trace's spans as bytes, grouped by the resource and scope they came with:
    sliced from the request they arrived in when its bytes were kept, else serialized."""
    origins = []
    for origin, positions in trace.spans_by_origin.items():
        sent = origin.as_sent()
        if sent is None:
            resource = origin.resource.SerializeToString()
            scope = origin.scope_spans.scope.SerializeToString()
            spans = origin.scope_spans.spans
            data = [spans[p].SerializeToString() for p in positions]
        else:
            resource, scope, spans = sent
            data = [spans[p] for p in positions]
        origins.append((resource, scope, data, origin.resource_spans.schema_url, origin.scope_spans.schema_url))
    return origins


def _trace_of(trace_id: bytes, session_id: str | None, origins: Origins) -> Trace:
    trace = Trace(trace_id, time.monotonic())
    trace.session_id = session_id
    for resource, scope, spans, resource_schema, scope_schema in origins:
        resource_spans = ResourceSpans(schema_url=resource_schema)
        resource_spans.resource.ParseFromString(resource)
        scope_spans = resource_spans.scope_spans.add(schema_url=scope_schema)
        scope_spans.scope.ParseFromString(scope)
        origin = ScopeOrigin(resource_spans, scope_spans)
        for position, data in enumerate(spans):
            span = scope_spans.spans.add()
            span.ParseFromString(data)
            trace.add(position, span, origin)
    return trace


def _encoded(
    origins: Origins, trace: Trace, anchor: Span, fields: bytes, findings: tuple[tuple[bytes, bytes], ...]
) -> bytes:
    """The trace with its scores, as the collector's attach stage would merge them: the
    anchor's fields, then each finding's on the last span of its id."""
    appended = {id(anchor): fields}
    if findings:
        spans = {span.span_id: span for span, _ in trace.spans()}
        for span_id, finding in findings:
            span = spans[span_id]  # the worker named a span of the trace, or the anchor
            appended[id(span)] = appended.get(id(span), b"") + finding
    return encoded_trace(origins, trace, appended)


class _WorkerHandle:
    """One worker process as the collector sees it: a pipe, a sender and a reader thread."""

    def __init__(self, index: int, setup: WorkerSetup, loop: asyncio.AbstractEventLoop, on_lost, on_observed):
        self.index = index
        self._loop = loop
        self._on_lost = on_lost
        self._on_observed = on_observed
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}  # by request id, with its item count
        self._next_id = 0
        self.ready: asyncio.Future = loop.create_future()
        self.lost = False
        self.judge_telemetry: list[JudgeTelemetry] = []  # as the worker last reported them
        context = multiprocessing.get_context("spawn")  # never fork the gRPC server's threads
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=worker_main, args=(child_conn, setup), daemon=True, name=f"spanscore-scoring-{index}"
        )
        self._process.start()
        child_conn.close()
        self.pid = self._process.pid
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()  # lists of messages, one per loop round
        self._batch: list[tuple] = []
        threading.Thread(target=self._send_forever, name=f"scoring-{index}-send", daemon=True).start()
        threading.Thread(target=self._receive_forever, name=f"scoring-{index}-receive", daemon=True).start()

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    async def ask(self, message: tuple) -> Any:
        return await self.submit(message)

    def submit(self, message: tuple, items: int = 1) -> asyncio.Future:
        """The future of the worker's answer to `message` (about `items` traces or
        sessions), sent with this loop round's."""
        future = self._loop.create_future()
        if self.lost:
            future.set_exception(WorkerLost(f"scoring worker process exited (code {self._process.exitcode})"))
            return future
        request_id = self._next_id
        self._next_id += 1
        self.pending[request_id] = (future, items)
        if not self._batch:
            self._loop.call_soon(self._flush)
        self._batch.append((request_id, *message))
        return future

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self._outbox.put(batch)

    def stop(self) -> None:
        self._flush()
        self._outbox.put([_STOP])

    async def join(self, deadline: float) -> None:
        process = self._process
        while process.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if process.is_alive():
            log.error("scoring worker %d did not stop by the shutdown deadline; killing it", self.index)
            process.kill()
            await asyncio.to_thread(process.join, 1.0)
        self._conn.close()

    # Threads -------------------------------------------------------------------------

    def _send_forever(self) -> None:
        outbox, conn = self._outbox, self._conn
        while True:
            batch = outbox.get()
            while not outbox.empty() and len(batch) < 512:
                batch += outbox.get_nowait()
            try:
                conn.send(batch)
            except (OSError, ValueError):  # the worker is gone; the reader reports it
                return
            if batch[-1] is _STOP:
                return

    def _receive_forever(self) -> None:
        while True:
            try:
                batch = self._conn.recv()
            except (EOFError, OSError, ValueError):
                self._process.join(5.0)
                self._loop.call_soon_threadsafe(self._lost)
                return
            self._loop.call_soon_threadsafe(self._deliver, batch)

    # Event loop ----------------------------------------------------------------------

    def _deliver(self, batch: list[tuple]) -> None:
        for kind, request_id, payload in batch:
            if kind == "ready":
                if not self.ready.done():
                    self.ready.set_result(payload)
            elif kind == "failed":
                if not self.ready.done():
                    self.ready.set_exception(RuntimeError(payload))
            elif kind == "judges":
                self.judge_telemetry = payload
            elif kind == "observed":
                self._on_observed(payload)
            else:
                asked = self.pending.pop(request_id, None)
                if asked is None:
                    continue
                future, _ = asked
                if not future.done():
                    future.set_result(payload)

    def _lost(self) -> None:
        self.lost = True
        error = WorkerLost(f"scoring worker process exited (code {self._process.exitcode}) while scoring")
        if not self.ready.done():
            self.ready.set_exception(
                RuntimeError(f"worker exited with code {self._process.exitcode} before it was ready")
            )
        for future, _ in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        self._on_lost(self)


# The worker process ------------------------------------------------------------------


def _share_budgets(processor: object, window: BudgetWindow | None) -> None:
    """The processor's budgeted judges count their spend in the window all workers share."""
    if window is None or not isinstance(processor, UsesJudges):
        return
    for judge in processor.judges():
        budget = getattr(judge, "budget", None)
        if budget is not None:
            budget.window = window


def worker_main(conn, setup: WorkerSetup) -> None:
    # Ctrl-C reaches the whole process group; the collector decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # As in the collector process: the judge's HTTP clients log request URLs at INFO.
    logging.basicConfig(
        level=max(setup.log_level, logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s [%(processName)s]: %(message)s",
    )
    logging.getLogger("spanscore").setLevel(setup.log_level)
    asyncio.run(_Worker(conn, setup).serve())


class _Worker:
    def __init__(self, conn, setup: WorkerSetup):
        self.conn = conn
        self.setup = setup
        self.sessions: dict[str, Session] = {}
        self._replies: list[tuple] = []
        self._observations = ScoreObservations()  # of this round's answers, sent with them
        self._tasks: set[asyncio.Task] = set()

    async def serve(self) -> None:
        processors = []
        try:
            for component_id, factory, config in self.setup.processors:
                processor = factory.create(component_id, config)
                processors.append((component_id, processor))
                await processor.start()
                _share_budgets(processor, self.setup.budget_windows.get(component_id))
            self.scoring = LocalScoring(processors, ScoreScope(self.setup.scope))
            provenance = self.provenance = self.scoring.provenance()
        except Exception as exc:
            log.exception("scoring worker failed to start")
            self.conn.send([("failed", None, f"{type(exc).__name__}: {exc}")])
            return
        self.conn.send([("ready", None, provenance)])
        self.processors = [processor for _, processor in processors]
        reports = any(isinstance(processor, UsesJudges) for processor in self.processors)
        reporter = asyncio.create_task(self._report_judges_forever()) if reports else None
        tune_for_collector()
        inbox: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._receive_forever, args=(loop, inbox), daemon=True).start()
        while True:
            batch = await inbox.get()
            stop = batch is None or batch[-1] == _STOP
            messages = (batch or [])[:-1] if stop else batch
            # Traces in flight have distinct sessions (the collector sends a session's
            # next trace only once the last is answered): they are scored as one batch.
            batches = [m for m in messages if m[1] == "traces"]
            if batches:
                self._spawn(self._answer_traces(batches))
            for message in messages:
                if message[1] != "traces":
                    self._spawn(self._answer(message))
            if stop:
                break
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        if reporter is not None:
            reporter.cancel()
            self._report_judges()  # the last word on what they spent
        for _, processor in processors:
            try:
                await processor.shutdown(time.monotonic() + 5.0)
            except Exception:
                log.exception("processor failed to shut down")
        self._flush()

    def _receive_forever(self, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue) -> None:
        while True:
            try:
                batch = self.conn.recv()
            except (EOFError, OSError):  # the collector is gone: finish and exit
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            loop.call_soon_threadsafe(inbox.put_nowait, batch)
            if batch[-1] == _STOP:
                return

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, message: tuple) -> None:
        request_id, _kind, session_id, links = message
        try:
            scored = await self._close_session(session_id, links)
        except Exception as exc:  # the processors' own failures are results already
            log.exception("scoring worker failed on a session")
            scored = Scored.failed(self.scoring.metric_names, exc)
        self._reply(request_id, scored)

    async def _answer_traces(self, messages: list[tuple]) -> None:
        """Each message's traces scored, all in one batch; answered a list per message."""
        traces = [trace for _, _, sent in messages for trace in sent]
        try:
            answers = await self._score_traces(traces)
        except Exception as exc:  # the processors' own failures are results already
            log.exception("scoring worker failed on a batch of traces")
            answers = [Scored.failed(self.scoring.metric_names, exc) for _ in traces]
        start = 0
        for request_id, _, sent in messages:
            self._reply(request_id, answers[start : start + len(sent)])
            start += len(sent)

    def _reply(self, request_id: int, scored: Scored | list[Scored]) -> None:
        self._send_soon(("scored", request_id, scored))

    def _send_soon(self, message: tuple) -> None:
        if not self._replies:
            asyncio.get_running_loop().call_soon(self._flush)
        self._replies.append(message)

    async def _report_judges_forever(self) -> None:
        while True:
            await asyncio.sleep(REPORT_INTERVAL_S)
            self._report_judges()

    def _report_judges(self) -> None:
        telemetry = judge_telemetry(self.processors)
        if telemetry:
            self._send_soon(("judges", None, telemetry))

    async def _score_traces(self, sent: list[tuple]) -> list[Scored]:
        traces = [_trace_of(*args) for args in sent]
        answers = await self.scoring.score_batch(traces, self._session_of)
        for (_, _, origins), trace, scored in zip(sent, traces, answers):
            if scored.skip_reason is None:
                self._prepare_trace(trace, origins, scored)
        return answers

    def _prepare_trace(self, trace: Trace, origins: Origins, scored: Scored) -> None:
        """Its scores as the bytes the collector merges (or the whole trace encoded with
        them), its score metrics observed."""
        anchor = trace.anchor
        if anchor is None:
            return
        usages = per_evaluator(scored.usages)
        fields = prepared_anchor(
            anchor, scored.results, usages, scored.attributes, self.provenance, self.setup.span_events
        )
        if fields is None:  # the span has some of the keys: the collector replaces them
            return
        findings: tuple[tuple[bytes, bytes], ...] = ()
        if scored.findings and self.setup.span_events:
            present = {span.span_id for span, _ in trace.spans()}
            findings = tuple(
                (
                    finding.span_id if finding.span_id in present else anchor.span_id,
                    finding_fields(finding, self.provenance.get(finding.name, CODE_PROVENANCE)),
                )
                for finding in scored.findings
            )
        if self.setup.score_labels is not None:
            service, agent = trace.service_name, agent_name_of(trace)
            self._observe(scored, service, agent)
            self._observations.add_findings(scored.findings, service, agent)
        if not self.setup.encode_traces:
            scored.prepared = PreparedScores(anchor.span_id, fields, findings)
            return
        encoded = _encoded(origins, trace, anchor, fields, findings)
        scored.attributes = []  # encoded with the trace; the collector reads them nowhere else
        if self.setup.send_results:
            scored.prepared = PreparedScores(anchor.span_id, encoded=encoded)
            return
        scores = {result.name: result.score for result in scored.results if result.score is not None}
        scored.prepared = PreparedScores(anchor.span_id, encoded=encoded, scores=scores)
        scored.results, scored.findings = [], []  # unpickling them was most of reading an answer

    def _observe(self, scored: Scored, service: str | None, agent: str | None) -> None:
        self._observations.add_results(
            scored.results, service, agent, scored.attributes, self.setup.score_labels, self.provenance
        )
        for usage in scored.usages:
            self._observations.add_usage(usage, service, agent)

    def _session_of(self, trace: Trace) -> Session | None:
        """The worker's own copy of the trace's session, where its processors keep state."""
        if trace.session_id is None:
            return None
        session = self.sessions.get(trace.session_id)
        if session is None:
            origin = trace.root_origin or next(iter(trace.spans_by_origin))
            session = self.sessions[trace.session_id] = Session(trace.session_id, origin.resource, 0.0)
        return session

    async def _close_session(self, session_id: str, links: list[tuple[bytes, bytes | None]]) -> Scored:
        session = self.sessions.pop(session_id, None)
        if session is None:  # none of its traces reached this worker (or it restarted)
            return Scored()
        start_ns = time.time_ns()
        scored = await self.scoring.score_session(session)
        carrier = None
        if scored.results or scored.attributes:
            carrier = carrier_spans(
                session_id,
                session.resource,
                links,
                scored.results,
                start_ns,
                time.time_ns(),
                VERSION,
                self.provenance,
                self.setup.span_events,
                scored.attributes,
                scored.usages,
            ).SerializeToString()
            if self.setup.score_labels is not None:
                self._observe(scored, find_attribute(session.resource.attributes, "service.name"), None)
        scored.prepared = PreparedScores(carrier=carrier)
        if self.setup.encode_traces and not self.setup.send_results:
            # The carrier holds them; unpickling the results was most of reading the answer.
            scored.results, scored.attributes = [], []
        return scored

    def _flush(self) -> None:
        replies, self._replies = self._replies, []
        if self._observations:
            replies.append(("observed", None, self._observations))
            self._observations = ScoreObservations()
        if replies:
            self.conn.send(replies)
