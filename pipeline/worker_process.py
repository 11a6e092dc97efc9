"""A scoring worker process: the collector's processors, run on copies of its traces.

It builds the processors from the `WorkerSetup`, answers `ScoreTraces` and
`CloseSession` (worker_messages) through the same `LocalScoring` as the collector
(saying what a batch has so far from its `ScoringProgress` when asked at max_hold), and
prepares what the attach stage would write through the same score writer, so the
collector's thread merges bytes: per trace the span fields (or, with `encode_traces`,
the whole trace encoded with them), per closed session its carrier, and per round the
score metrics' observations. A session's traces all come to one worker, which keeps
the processors' state of the session here.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.encoded_trace import Origins, encoded_trace
from spanscore.pipeline.gc_tuning import collect_cycles_forever, tune_for_collector
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_scope import ScoreScope
from spanscore.pipeline.score_writer import Link, ScoreWriter
from spanscore.pipeline.scoring import LocalScoring, Scored, ScoringProgress
from spanscore.pipeline.worker_messages import (
    Answer,
    AskProgress,
    Cancel,
    CloseSession,
    FromWorker,
    JudgesReport,
    Observed,
    Progress,
    Ready,
    ScoreTraces,
    StartFailed,
    Stop,
    ToWorker,
    WorkerSetup,
    received_trace,
)
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.budget import BudgetWindow
from spanscore.processors.judge_metrics.telemetry import REPORT_INTERVAL_S, judge_telemetry

log = logging.getLogger("spanscore.scoring_workers")


def start_worker(index: int, setup: WorkerSetup) -> tuple[Connection, BaseProcess]:
    """A started worker process and the collector's end of its pipe."""
    context = multiprocessing.get_context("spawn")  # never fork the gRPC server's threads
    conn, child_conn = context.Pipe()
    process = context.Process(
        target=worker_main, args=(child_conn, setup), daemon=True, name=f"spanscore-scoring-{index}"
    )
    process.start()
    child_conn.close()
    return conn, process


def worker_main(conn: Connection, setup: WorkerSetup) -> None:
    # Ctrl-C reaches the whole process group; the collector decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # As in the collector process: the judge's HTTP clients log request URLs at INFO.
    logging.basicConfig(
        level=max(setup.log_level, logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s [%(processName)s]: %(message)s",
    )
    logging.getLogger("spanscore").setLevel(setup.log_level)
    asyncio.run(Worker(conn, setup).serve())


def _share_budgets(processor: object, window: BudgetWindow | None) -> None:
    """The processor's budgeted judges count their spend in the window all workers share."""
    if window is None or not isinstance(processor, UsesJudges):
        return
    for judge in processor.judges():
        budget = getattr(judge, "budget", None)
        if budget is not None:
            budget.window = window


def _encoded(
    origins: Origins, trace: Trace, anchor: Span, fields: bytes, span_fields: tuple[tuple[bytes, bytes], ...]
) -> bytes:
    """The trace with its scores, as the collector's attach stage would merge them: the
    anchor's fields, then each other span's (span-level results, findings) on the last
    span of its id."""
    appended = {id(anchor): fields}
    if span_fields:
        spans = {span.span_id: span for span, _ in trace.spans()}
        for span_id, more in span_fields:
            span = spans[span_id]  # the writer named a span of the trace, or the anchor
            appended[id(span)] = appended.get(id(span), b"") + more
    return encoded_trace(origins, trace, appended)


@dataclass
class _Batch:
    """A round's traces, scored as one batch: its requests' traces by request id."""

    traces: dict[int, list[Trace]]
    progress: ScoringProgress = field(default_factory=ScoringProgress)
    # Requests whose traces' spans left already (max_hold, a re-score): answered not prepared.
    left: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)  # requests whose answer is not wanted
    task: asyncio.Task | None = None


class Worker:
    """The worker's side of the pipe: messages in, answers out, on one event loop."""

    def __init__(self, conn: Connection, setup: WorkerSetup):
        self.conn = conn
        self.setup = setup
        self.sessions: dict[str, Session] = {}
        self._replies: list[FromWorker] = []
        self._observations = ScoreObservations()  # of this round's answers, sent with them
        self._tasks: set[asyncio.Task] = set()
        self._batches: dict[int, _Batch] = {}  # being scored, by request id

    async def serve(self) -> None:
        processors = []
        try:
            for component_id, factory, config in self.setup.processors:
                processor = factory.build(component_id, config)
                processors.append((component_id, processor))
                await processor.start()
                _share_budgets(processor, self.setup.budget_windows.get(component_id))
            self.scoring = LocalScoring(processors, ScoreScope(self.setup.scope))
            provenance = self.scoring.provenance()
        except Exception as exc:
            log.exception("scoring worker failed to start")
            self.conn.send([StartFailed(f"{type(exc).__name__}: {exc}")])
            return
        self.writer = ScoreWriter(provenance, self.setup.span_events, self.setup.score_labels)
        self.conn.send([Ready(provenance)])
        self.processors = [processor for _, processor in processors]
        reports = any(isinstance(processor, UsesJudges) for processor in self.processors)
        reporter = asyncio.create_task(self._report_judges_forever()) if reports else None
        tune_for_collector()
        sweeper = asyncio.create_task(collect_cycles_forever(), name="gc-full-passes")
        inbox: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._receive_forever, args=(loop, inbox), daemon=True).start()
        while True:
            batch = await inbox.get()
            if self.handle(batch or []) or batch is None:
                break
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        sweeper.cancel()
        if reporter is not None:
            reporter.cancel()
            self._report_judges()  # the last word on what they spent
        for _, processor in processors:
            try:
                await processor.shutdown(time.monotonic() + 5.0)
            except Exception:
                log.exception("processor failed to shut down")
        self._flush()

    def handle(self, batch: list[ToWorker]) -> bool:
        """Start answering a round's messages; True when it ends with `Stop`."""
        # Traces in flight have distinct sessions (the collector sends a session's next
        # trace only once the last is answered): they are scored as one batch.
        traces = [message for message in batch if isinstance(message, ScoreTraces)]
        if traces:
            self._score(traces)
        for message in batch:
            if isinstance(message, CloseSession):
                self._spawn(self._answer_session(message))
            elif isinstance(message, AskProgress):
                self._report_progress(message.request_id)
            elif isinstance(message, Cancel):
                self._cancel(message.request_id)
            elif not isinstance(message, (ScoreTraces, Stop)):
                log.error("scoring worker got a message it has no use for: %.200r", message)
        return bool(batch) and isinstance(batch[-1], Stop)

    def _receive_forever(self, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue) -> None:
        while True:
            try:
                batch = self.conn.recv()
            except (EOFError, OSError):  # the collector is gone: finish and exit
                loop.call_soon_threadsafe(inbox.put_nowait, None)
                return
            loop.call_soon_threadsafe(inbox.put_nowait, batch)
            if batch and isinstance(batch[-1], Stop):
                return

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _score(self, messages: list[ScoreTraces]) -> None:
        try:
            traces = {message.request_id: [received_trace(one) for one in message.traces] for message in messages}
        except Exception as exc:  # spans the collector parsed: not expected, but not the worker's end
            log.exception("scoring worker could not read a batch of traces")
            for message in messages:
                failed = [Scored.failed(self.scoring.metric_names, exc) for _ in message.traces]
                self._send_soon(Answer(message.request_id, failed))
            return
        batch = _Batch(traces)
        batch.left.update(message.request_id for message in messages if message.left)
        for message in messages:
            self._batches[message.request_id] = batch
        batch.task = self._spawn(self._answer_traces(messages, batch))

    def _report_progress(self, request_id: int) -> None:
        """What the request's traces have so far; from now on its answer is not prepared
        (the traces left with this, the rest follows). Nothing is known of a request
        answered already: its answer is on its way."""
        batch = self._batches.get(request_id)
        if batch is None:
            self._send_soon(Progress(request_id, [], ()))
            return
        batch.left.add(request_id)
        so_far = [batch.progress.so_far(trace) for trace in batch.traces[request_id]]
        self._send_soon(Progress(request_id, so_far, batch.progress.pending))

    def _cancel(self, request_id: int) -> None:
        """No answer to the request; its batch's scoring stops when no answer is wanted."""
        batch = self._batches.get(request_id)
        if batch is None:  # answered already
            return
        batch.cancelled.add(request_id)
        if batch.task is not None and batch.cancelled.issuperset(batch.traces):
            batch.task.cancel()

    async def _answer_session(self, message: CloseSession) -> None:
        try:
            scored = await self._close_session(message.session_id, message.links)
        except Exception as exc:  # the processors' own failures are results already
            log.exception("scoring worker failed on a session")
            scored = Scored.failed(self.scoring.metric_names, exc)
        self._send_soon(Answer(message.request_id, scored))

    async def _answer_traces(self, messages: list[ScoreTraces], batch: _Batch) -> None:
        """Each message's traces scored, all in one batch; answered a list per message
        (none to a cancelled one; a cancelled batch not at all)."""
        traces = [trace for message in messages for trace in batch.traces[message.request_id]]
        try:
            answers = await self.scoring.score_batch(traces, self._session_of, batch.progress)
        except Exception as exc:  # the processors' own failures are results already
            log.exception("scoring worker failed on a batch of traces")
            answers = [Scored.failed(self.scoring.metric_names, exc) for _ in traces]
        finally:
            for message in messages:
                del self._batches[message.request_id]
        start = 0
        for message in messages:
            end = start + len(message.traces)
            if message.request_id in batch.cancelled:
                start = end
                continue
            if message.request_id not in batch.left:
                for sent, trace, scored in zip(message.traces, traces[start:end], answers[start:end]):
                    if scored.skip_reason is None:
                        self._prepare_trace(trace, sent[3], scored)
            self._send_soon(Answer(message.request_id, answers[start:end]))
            start = end

    def _send_soon(self, message: FromWorker) -> None:
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
            self._send_soon(JudgesReport(telemetry))

    @property
    def _observing(self) -> ScoreObservations | None:
        return self._observations if self.setup.score_labels is not None else None

    def _prepare_trace(self, trace: Trace, origins: Origins, scored: Scored) -> None:
        """Its scores as the bytes the collector merges (or the whole trace encoded with
        them), its score metrics observed; left to the collector when the writer declines."""
        prepared = self.writer.prepare_trace(trace, scored, self._observing)
        anchor = trace.anchor  # there is one when the writer prepared scores
        if prepared is None or anchor is None:
            return
        if not self.setup.encode_traces:
            scored.prepared = prepared
            return
        encoded = _encoded(origins, trace, anchor, prepared.anchor, prepared.span_fields)
        scored.attributes, scored.span_attributes = [], []  # encoded with the trace; read nowhere else
        if self.setup.send_results:
            scored.prepared = PreparedScores(anchor.span_id, encoded=encoded)
            return
        scores = {result.name: result.score for result in scored.results if result.score is not None}
        scored.prepared = PreparedScores(anchor.span_id, encoded=encoded, scores=scores)
        # Unpickling them was most of reading an answer.
        scored.results, scored.span_results, scored.findings = [], [], []

    def _session_of(self, trace: Trace) -> Session | None:
        """The worker's own copy of the trace's session, where its processors keep state."""
        if trace.session_id is None:
            return None
        session = self.sessions.get(trace.session_id)
        if session is None:
            origin = trace.root_origin or next(iter(trace.spans_by_origin))
            session = self.sessions[trace.session_id] = Session(trace.session_id, origin.resource, 0.0)
        return session

    async def _close_session(self, session_id: str, links: tuple[Link, ...]) -> Scored:
        session = self.sessions.pop(session_id, None)
        if session is None:  # none of its traces reached this worker (or it restarted)
            return Scored()
        start_ns = time.time_ns()
        scored = await self.scoring.score_session(session)
        carrier = self.writer.carrier(
            session_id, session.resource, links, scored.results, scored, start_ns, self._observing
        )
        scored.prepared = PreparedScores(carrier=None if carrier is None else carrier.SerializeToString())
        if self.setup.encode_traces and not self.setup.send_results:
            # The carrier holds them; unpickling the results was most of reading the answer.
            scored.results, scored.attributes = [], []
        return scored

    def _flush(self) -> None:
        replies, self._replies = self._replies, []
        if self._observations:
            replies.append(Observed(self._observations))
            self._observations = ScoreObservations()
        if replies:
            self.conn.send(replies)
