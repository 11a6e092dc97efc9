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

`max_hold` holds as in process: when a batch's traces are due to leave, each worker
scoring them is asked what it has so far (the same `ScoringProgress` the pipeline reads
of `LocalScoring`), they leave with that, and the worker's answer, not prepared then,
brings the rest for the carrier. Nothing is asked while scoring is quick. A batch given
up is cancelled in its workers.

A worker that dies (killed, out of memory) costs the traces it held their scores, not
the traces: each gets an error result per metric saying so and is exported. The worker
is started again; the sessions it held start over there.

This module is the pool: which worker a trace or session goes to, and restarts. The
messages are in worker_messages, one worker's pipe and futures in worker_handle, the
worker process in worker_process.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection

from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.provenance import Provenance
from spanscore.core.session import Session, TraceSummary
from spanscore.core.telemetry import Readout, TelemetryMetric
from spanscore.core.trace import Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.score_scope import ScoreScope
from spanscore.pipeline.scoring import Scored, ScoringProgress, SessionOf, scope_skip_reason, unscored_in_scope
from spanscore.pipeline.worker_handle import WorkerHandle, WorkerLost, WorkerProcess
from spanscore.pipeline.worker_messages import WorkerSetup, sent_trace
from spanscore.pipeline.worker_process import start_worker
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry, judge_readouts, spent

__all__ = ["WorkerScoring", "WorkerSetup"]

log = logging.getLogger("spanscore.scoring_workers")

# Starts worker `index` with the setup: the collector's end of its pipe, and the process.
StartWorker = Callable[[int, WorkerSetup], tuple[Connection, WorkerProcess]]

# How long a trace leaving at max_hold waits for its worker to say what it has so far.
PROGRESS_WAIT_S = 1.0


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
        start_worker: StartWorker = start_worker,
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
        self.shows_progress = True  # each worker says what it has when asked (ScoringProgress.catch_up)
        self._scope = ScoreScope(setup.scope)  # here only for the traces a shutdown leaves unscored
        self._retired = JudgeTelemetry()  # what the judges of workers that exited spent
        self._start_worker = start_worker
        self._workers: list[WorkerHandle] = []
        self._provenance: dict[str, Provenance] = {}
        self._stopping = False
        self.restarts = 0
        # Where the score metrics the workers observed go (the attach stage's `observe`).
        self.on_observations: Callable[[ScoreObservations], None] | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        self._workers = [self._started(i) for i in range(self.count)]
        ready = await asyncio.gather(*(w.ready for w in self._workers), return_exceptions=True)
        problems = [str(r) for r in ready if isinstance(r, BaseException)]
        if problems:
            raise RuntimeError(f"scoring workers failed to start: {problems[0]}")
        self._provenance = next(r for r in ready if not isinstance(r, BaseException))
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

    async def score_batch(
        self, traces: Sequence[Trace], session_of: SessionOf, progress: ScoringProgress | None = None
    ) -> list[Scored]:
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
        requests: list[tuple[WorkerHandle, int, list[int]]] = []
        left = progress.left if progress is not None else frozenset()
        for index, at in positions.items():
            # A trace outside the sessions (none opened for it) goes without its session id.
            sent = [sent_trace(traces[p], traces[p].session_id if sessions[p] is not None else None) for p in at]
            worker = self._workers[index]
            gone = any(id(traces[p]) in left or traces[p].sequence > 1 for p in at)  # their results go on carriers
            request_id, answer = worker.score_traces(sent, left=gone)
            asked.append(answer)
            requests.append((worker, request_id, at))
        if progress is not None:
            progress.catch_up = lambda: self._catch_up(traces, requests, progress)
        answers: list[Scored | None] = [None] * len(traces)  # each set below
        for at, answer in zip(positions.values(), await asyncio.gather(*asked, return_exceptions=True)):
            if isinstance(answer, WorkerLost):
                answer = [Scored.failed(self.metric_names, answer) for _ in at]
            elif isinstance(answer, BaseException):  # not the worker's failure: the pipeline's to handle
                raise answer
            for position, scored in zip(at, answer):
                answers[position] = scored
        scored_traces = [scored for scored in answers if scored is not None]
        if len(scored_traces) < len(traces):
            raise RuntimeError(f"the scoring workers answered {len(scored_traces)} of {len(traces)} traces")
        for trace, session, scored in zip(traces, sessions, scored_traces):
            if session is not None and scored.skip_reason is None:
                prepared = scored.prepared
                scores = prepared.scores if prepared is not None else None
                if scores is None:  # not trace.results: those of a trace that left are what it left with
                    scores = {result.name: result.score for result in scored.results if result.score is not None}
                session.traces.append(TraceSummary.of(trace, scores))
        return scored_traces

    async def _catch_up(
        self, traces: Sequence[Trace], requests: list[tuple[WorkerHandle, int, list[int]]], progress: ScoringProgress
    ) -> None:
        """`progress` as the workers report it now (their answers from now on not prepared:
        the traces leave with what is reported, the rest follows). The traces of a worker
        that does not say within PROGRESS_WAIT_S (busy in a processor that does not yield,
        as one would hold the collector's own loop) wait for their whole scoring."""
        asked = [worker.ask_progress(request_id) for worker, request_id, _ in requests]
        await asyncio.wait(asked, timeout=PROGRESS_WAIT_S)
        for future, (_, _, at) in zip(asked, requests):
            if not future.done():
                future.cancel()
                continue
            reported = future.result()
            if reported is not None:  # else its answer came first
                for position, so_far in zip(at, reported.so_far):
                    if so_far is not None:
                        progress.reported(traces[position], so_far, reported.pending)

    def skip_reason(self, trace: Trace) -> str | None:
        return scope_skip_reason(self._scope, trace)

    def left_unscored(self, trace: Trace, session_of: SessionOf, why: str) -> Scored:
        return unscored_in_scope(self.skip_reason(trace), trace, session_of, self.trace_metric_names, why)

    async def score_session(self, session: Session) -> Scored:
        worker = self._workers[zlib.crc32(session.session_id.encode("utf-8")) % len(self._workers)]
        # The carrier links the traces this process scored in the session (a worker that
        # restarted knows fewer).
        links = [(t.trace_id, t.anchor_span_id) for t in session.traces]
        try:
            return await worker.close_session(session.session_id, links)
        except WorkerLost as exc:
            return Scored.failed(self.metric_names, exc)

    def _observed(self, observations: ScoreObservations) -> None:
        if self.on_observations is not None:
            self.on_observations(observations)

    def _started(self, index: int) -> WorkerHandle:
        conn, process = self._start_worker(index, self.setup)
        return WorkerHandle(index, conn, process, asyncio.get_running_loop(), self._lost, self._observed)

    def _lost(self, handle: WorkerHandle) -> None:
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
        self._workers[handle.index] = self._started(handle.index)

    async def shutdown(self, deadline: float) -> None:
        self._stopping = True
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            await worker.join(deadline)
