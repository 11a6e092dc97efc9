"""The scoring workers' pool and dispatcher, with the worker side scripted at the pipe's end.

Each test's workers are threads speaking the worker messages over a real pipe, so the
routing by session, the futures by request id, a worker's death and restart, and what
a worker reports besides its answers are checked without starting processes (the e2e
tests run the real worker processes)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import zlib
from multiprocessing import Pipe

import pytest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.score_scope import ScoreScopeConfig
from spanscore.pipeline.scoring import Scored, ScoringProgress
from spanscore.pipeline.scoring_workers import WorkerScoring
from spanscore.pipeline.worker_messages import (
    Answer,
    AskProgress,
    Cancel,
    CloseSession,
    JudgesReport,
    Observed,
    Progress,
    Ready,
    ScoreTraces,
    StartFailed,
    Stop,
    WorkerSetup,
)
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry
from tests.support.spans import new_trace_id, span

PROVENANCE = {"toy": Provenance("spanscore/toy", "1"), "toy_session": Provenance("spanscore/toy", "1")}
SETUP = WorkerSetup([], ScoreScopeConfig(), logging.INFO)
_pids = itertools.count(1000)


class FakeProcess:
    def __init__(self):
        self.pid = next(_pids)
        self.exitcode: int | None = None

    def is_alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        pass

    def kill(self) -> None:
        self.exitcode = -9


class Died(Exception):
    """Raised by a script: the worker process exits there."""


def toy_answers(message) -> list:
    """A trace's result explains which trace it is; a session's, which session."""
    if isinstance(message, ScoreTraces):
        answers = [
            Scored(results=[MetricResult(name="toy", score=1.0, explanation=trace_id.hex())])
            for trace_id, _, _, _ in message.traces
        ]
        return [Answer(message.request_id, answers)]
    results = [MetricResult(name="toy_session", score=1.0, explanation=f"{message.session_id} {len(message.links)}")]
    return [Answer(message.request_id, Scored(results=results))]


class Workers:
    """`start_worker` for the pool: each worker a thread at the pipe's other end,
    answering each round's messages with what `script(index, start, message)` returns."""

    def __init__(self, script=None, first=None):
        self.script = script or (lambda index, start, message: toy_answers(message))
        self.first = first or [Ready(PROVENANCE)]
        self.started: list[int] = []  # worker index, per start
        self.got: list[tuple[int, object]] = []  # (worker index, message), as they arrived

    def __call__(self, index: int, setup: WorkerSetup):
        conn, child = Pipe()
        process = FakeProcess()
        start = self.started.count(index)
        self.started.append(index)
        threading.Thread(target=self._serve, args=(index, start, child, process), daemon=True).start()
        return conn, process

    def _serve(self, index, start, conn, process) -> None:
        conn.send(self.first)
        while True:
            batch = conn.recv()
            replies = []
            try:
                for message in batch:
                    self.got.append((index, message))
                    if isinstance(message, Stop):
                        process.exitcode = 0
                        conn.close()
                        return
                    replies += self.script(index, start, message)
            except Died:
                process.exitcode = -9
                conn.close()
                return
            conn.send(replies)


def trace_in(session_id: str | None) -> Trace:
    trace_id = new_trace_id()
    trace = Trace(trace_id, 0.0)
    trace.session_id = session_id
    resource_spans = ResourceSpans()
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.spans.append(span(trace_id, "agent"))
    trace.add(0, scope_spans.spans[0], ScopeOrigin(resource_spans, scope_spans))
    return trace


def worker_of(key: bytes, count: int = 2) -> int:
    return zlib.crc32(key) % count


class SessionsOf:
    def __init__(self):
        self.opened: dict[str, Session] = {}

    def __call__(self, trace: Trace) -> Session | None:
        if trace.session_id is None:
            return None
        return self.opened.setdefault(trace.session_id, Session(trace.session_id, Resource(), 0.0))


@pytest.fixture
async def pool():
    started = []

    async def start(workers: Workers, count: int = 2) -> WorkerScoring:
        scoring = WorkerScoring(SETUP, count, ("toy",), ("toy_session",), True, start_worker=workers)
        started.append(scoring)
        await scoring.start()
        return scoring

    yield start
    for scoring in started:
        await scoring.shutdown(time.monotonic() + 5.0)


async def test_each_trace_is_answered_by_the_worker_its_session_goes_to(pool):
    workers = Workers()
    scoring = await pool(workers)
    assert scoring.provenance() == PROVENANCE and len(set(scoring.pids)) == 2
    traces = [trace_in(f"session-{n}") for n in range(6)] + [trace_in(None), trace_in(None)]
    sessions = SessionsOf()
    answers = await scoring.score_batch(traces, sessions)
    assert [a.results[0].explanation for a in answers] == [t.trace_id.hex() for t in traces]
    sent_to = {t[0]: index for index, m in workers.got if isinstance(m, ScoreTraces) for t in m.traces}
    for trace in traces:
        key = trace.session_id.encode() if trace.session_id else trace.trace_id
        assert sent_to[trace.trace_id] == worker_of(key)
    # one message per worker for the batch, each trace sent with its session id
    assert sorted(index for index, m in workers.got if isinstance(m, ScoreTraces)) == [0, 1]
    sent = {t[0]: t[1] for _, m in workers.got if isinstance(m, ScoreTraces) for t in m.traces}
    assert sent == {t.trace_id: t.session_id for t in traces}
    assert {sid: [s.trace_id for s in session.traces] for sid, session in sessions.opened.items()} == {
        t.session_id: [t.trace_id] for t in traces if t.session_id
    }
    assert scoring.in_flight == 0


async def test_a_trace_outside_the_sessions_goes_without_its_session_id(pool):
    workers = Workers()
    scoring = await pool(workers)
    trace = trace_in("session-1")
    await scoring.score_batch([trace], lambda trace: None)  # sessions are not tracked
    [(index, sent)] = [(i, t) for i, m in workers.got if isinstance(m, ScoreTraces) for t in m.traces]
    assert sent[1] is None and index == worker_of(trace.trace_id)


async def test_a_session_closes_in_the_worker_that_scored_its_traces(pool):
    workers = Workers()
    scoring = await pool(workers)
    sessions = SessionsOf()
    await scoring.score_batch([trace_in("session-7"), trace_in(None)], sessions)
    await scoring.score_batch([trace_in("session-7")], sessions)
    scored = await scoring.score_session(sessions.opened["session-7"])
    assert scored.results[0].explanation == "session-7 2"  # both traces linked
    [(index, close)] = [(i, m) for i, m in workers.got if isinstance(m, CloseSession)]
    assert index == worker_of(b"session-7") and close.session_id == "session-7"
    assert close.links == tuple((t.trace_id, t.anchor_span_id) for t in sessions.opened["session-7"].traces)


async def test_a_worker_that_fails_to_start_fails_the_start(pool):
    with pytest.raises(RuntimeError, match="scoring workers failed to start: ValueError: no model"):
        await pool(Workers(first=[StartFailed("ValueError: no model")]), count=1)


async def test_a_worker_that_dies_costs_its_traces_their_scores_and_is_started_again(pool):
    def die_once(index, start, message):
        if start == 0 and isinstance(message, ScoreTraces):
            raise Died
        return toy_answers(message)

    workers = Workers(die_once)
    scoring = await pool(workers, count=1)
    traces = [trace_in("session-1"), trace_in(None)]
    answers = await scoring.score_batch(traces, SessionsOf())
    for answer in answers:  # every metric failed, saying why
        assert [(r.name, r.score) for r in answer.results] == [("toy", None), ("toy_session", None)]
        assert all("exited (code -9)" in r.error for r in answer.results)
    assert scoring.restarts == 1 and workers.started == [0, 0]
    await scoring._workers[0].ready
    again = await scoring.score_batch([traces[0]], SessionsOf())
    assert again[0].results[0].explanation == traces[0].trace_id.hex()


async def test_at_max_hold_each_worker_is_asked_what_it_has_and_a_cancelled_batch_is_cancelled_there(pool):
    def judge_down(index, start, message):  # says what it has, never answers
        if isinstance(message, AskProgress):
            so_far = Scored(results=[MetricResult(name="quick", score=0.5)])
            return [Progress(message.request_id, [so_far, None], ("toy",))]
        return []

    workers = Workers(judge_down)
    scoring = await pool(workers, count=1)
    traces = [trace_in(None), trace_in(None)]
    progress = ScoringProgress()
    batch = asyncio.ensure_future(scoring.score_batch(traces, SessionsOf(), progress))
    await asyncio.sleep(0.05)
    assert scoring.in_flight == 2 and progress.catch_up is not None
    await progress.catch_up()
    early = progress.so_far(traces[0])
    assert early is not None and [r.name for r in early.results] == ["quick"]
    assert progress.pending_of(traces[0]) == ("toy",)
    assert progress.so_far(traces[1]) is None  # not known: it waits for the whole scoring

    batch.cancel()  # given up past max_following_traces
    await asyncio.gather(batch, return_exceptions=True)
    assert scoring.in_flight == 0
    for _ in range(100):  # the Cancel goes with the loop's next round
        if len(workers.got) == 3:
            break
        await asyncio.sleep(0.02)
    assert [type(m) for _, m in workers.got] == [ScoreTraces, AskProgress, Cancel]


async def test_a_session_whose_worker_died_fails_its_metrics(pool):
    def die_on_sessions(index, start, message):
        if isinstance(message, CloseSession):
            raise Died
        return toy_answers(message)

    scoring = await pool(Workers(die_on_sessions), count=1)
    scored = await scoring.score_session(Session("session-1", Resource(), 0.0))
    assert [(r.name, r.score) for r in scored.results] == [("toy", None), ("toy_session", None)]
    assert all("exited" in r.error for r in scored.results)


async def test_what_a_worker_reports_besides_answers_and_what_it_says_unasked(pool, caplog):
    observations = ScoreObservations()
    observations.add_results([MetricResult(name="toy", score=1.0)], "agent", None)
    report = [JudgeTelemetry(requests=4)]

    def chatty(index, start, message):
        unasked = [Answer(9999, Scored()), ("scored", message.request_id, Scored()), Observed(observations)]
        return [*unasked, JudgesReport(report), *toy_answers(message)]

    scoring = await pool(Workers(chatty), count=1)
    seen = []
    scoring.on_observations = seen.append
    trace = trace_in(None)
    with caplog.at_level(logging.ERROR, "spanscore.scoring_workers"):
        [answer] = await scoring.score_batch([trace], SessionsOf())
    assert answer.results[0].explanation == trace.trace_id.hex()
    assert "no use for" in caplog.text  # the tuple of the old protocol, logged and passed over
    assert [o.counts for o in seen] == [observations.counts]
    assert report[0] in scoring.judge_telemetry()


async def test_shutdown_stops_every_worker_after_what_it_was_sent(pool):
    workers = Workers()
    scoring = WorkerScoring(SETUP, 2, ("toy",), ("toy_session",), True, start_worker=workers)
    await scoring.start()
    processes = [w._process for w in scoring._workers]
    await scoring.shutdown(time.monotonic() + 5.0)
    assert [type(m) for _, m in workers.got].count(Stop) == 2
    assert all(process.exitcode == 0 for process in processes)
