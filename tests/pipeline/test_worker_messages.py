"""The scoring workers' messages: each survives the pipe's pickling whole, a side that
gets a message it has no use for says so and goes on, and a worker over a real pipe
says what it has at max_hold (AskProgress) and stops what is cancelled."""

from __future__ import annotations

import asyncio
import logging
import pickle
from multiprocessing import Pipe

import pytest
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_scope import ScoreScopeConfig
from spanscore.pipeline.scoring import Scored
from spanscore.pipeline.worker_messages import (
    STOP,
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
    received_trace,
    sent_trace,
)
from spanscore.pipeline.worker_process import Worker
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry
from tests.support.spans import kv, new_span_id, new_trace_id, span
from tests.support.toy_metric import FACTORY, ToyMetricConfig


def two_origin_trace() -> Trace:
    """A trace whose spans came in two resources, the second with schema URLs."""
    trace_id, root_id = new_trace_id(), new_span_id()
    trace = Trace(trace_id, 0.0)
    for service, spans, schema in [
        ("agent", [span(trace_id, "agent", span_id=root_id), span(trace_id, "llm", parent=root_id)], ""),
        ("tools", [span(trace_id, "tool", parent=root_id)], "https://opentelemetry.io/schemas/1.26.0"),
    ]:
        resource_spans = ResourceSpans(resource=Resource(attributes=[kv("service.name", service)]), schema_url=schema)
        scope_spans = ScopeSpans(scope=InstrumentationScope(name="tests"), spans=spans, schema_url=schema)
        resource_spans.scope_spans.append(scope_spans)
        origin = ScopeOrigin(resource_spans, resource_spans.scope_spans[0])
        for position, one in enumerate(origin.scope_spans.spans):
            trace.add(position, one, origin)
    return trace


def piped(message):
    return pickle.loads(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def test_a_sent_trace_is_the_same_trace_in_the_worker():
    trace = two_origin_trace()
    copy = received_trace(piped(sent_trace(trace, "session-1")))
    assert copy.trace_id == trace.trace_id and copy.session_id == "session-1"
    assert [s for s, _ in copy.spans()] == [s for s, _ in trace.spans()]
    assert [(o.resource, o.resource_spans.schema_url, o.scope_spans.schema_url) for o in copy.spans_by_origin] == [
        (o.resource, o.resource_spans.schema_url, o.scope_spans.schema_url) for o in trace.spans_by_origin
    ]
    assert copy.anchor.span_id == trace.anchor.span_id


SCORED = Scored(
    results=[
        MetricResult(name="toy", score=0.5, explanation="2 spans"),
        MetricResult.failure("other", ValueError("x")),
    ],
    prepared=PreparedScores(b"anchor-id", b"fields", ((b"span-id", b"event"),), scores={"toy": 0.5}),
)
OBSERVATIONS = ScoreObservations()
OBSERVATIONS.add_results(SCORED.results, "agent", None)


@pytest.mark.parametrize(
    "message",
    [
        ScoreTraces(7, (sent_trace(two_origin_trace(), None),)),
        ScoreTraces(7, (sent_trace(two_origin_trace(), "session-1"),), left=True),
        AskProgress(7),
        Cancel(7),
        Progress(7, [SCORED, None, Scored(skip_reason="not an agent trace")], ("slow",)),
        CloseSession(8, "session-1", ((b"t" * 16, b"s" * 8), (b"u" * 16, None))),
        STOP,
        Ready({"toy": Provenance("spanscore/toy", "1")}),
        StartFailed("ValueError: no such model"),
        Answer(7, [SCORED, Scored(skip_reason="not an agent trace")]),
        Answer(8, SCORED),
        JudgesReport([JudgeTelemetry(requests=3, input_tokens=120)]),
        Observed(OBSERVATIONS),
    ],
    ids=lambda message: type(message).__name__,
)
def test_every_message_survives_the_pipe(message):
    copy = piped(message)
    assert type(copy) is type(message)
    if isinstance(message, Observed):  # no equality of its own: compared by what it counted
        assert (copy.observations.scores.keys(), copy.observations.counts) == (
            message.observations.scores.keys(),
            message.observations.counts,
        )
    else:
        assert copy == message


def test_the_setup_survives_the_pipe():
    # Budget windows are shared memory, which only goes to a process as it is started
    # (the e2e judge tests have workers share one); the rest pickles like any message.
    setup = WorkerSetup(
        [("toy_metric", FACTORY, ToyMetricConfig(name="toy"))],
        ScoreScopeConfig(),
        logging.INFO,
        score_labels=frozenset({"eval.tier"}),
        encode_traces=True,
    )
    assert piped(setup) == setup


def test_the_worker_logs_a_message_it_has_no_use_for_and_goes_on(caplog):
    worker = Worker(conn=None, setup=None)
    with caplog.at_level(logging.ERROR, "spanscore.scoring_workers"):
        assert worker.handle([("session", 3, "session-1", [])]) is False
    assert "no use for" in caplog.text
    assert worker.handle([Stop()]) is True  # a Stop unpickled is not the module's STOP


def test_the_worker_stops_after_what_came_with_stop():
    worker = Worker(conn=None, setup=None)
    closed = []

    async def close(message):
        closed.append(message.session_id)

    async def round_with_stop():
        worker._answer_session = close
        stop = worker.handle([CloseSession(1, "session-1", ()), STOP])
        await asyncio.wait(list(worker._tasks))
        return stop

    assert asyncio.run(round_with_stop()) is True
    assert closed == ["session-1"]


QUICK_AND_SLOW = WorkerSetup(
    [
        ("processor/0", FACTORY, ToyMetricConfig(name="quick")),
        ("processor/1", FACTORY, ToyMetricConfig(name="slow", delay_s=0.5)),
    ],
    ScoreScopeConfig(agent_traces_only=False),
    logging.INFO,
)


async def _speaking_to_worker(talk):
    """`talk(send, receive)` with a `Worker` serving the other end of a real pipe."""
    ours, theirs = Pipe()
    worker = Worker(theirs, QUICK_AND_SLOW)
    serving = asyncio.create_task(worker.serve())

    async def receive(timeout_s: float = 5.0) -> list:
        assert await asyncio.to_thread(ours.poll, timeout_s), "the worker said nothing"
        return ours.recv()

    try:
        assert isinstance((await receive(30.0))[0], Ready)
        return await talk(ours.send, receive, worker)
    finally:
        ours.send([STOP])
        await asyncio.wait_for(serving, 10.0)


def test_asked_at_max_hold_a_worker_says_what_it_has_and_answers_the_rest_not_prepared():
    trace = two_origin_trace()

    async def talk(send, receive, worker):
        send([ScoreTraces(1, (sent_trace(trace, None),))])
        await asyncio.sleep(0.2)  # quick is done, slow sleeps
        send([AskProgress(1)])
        [progress] = await receive()
        [answer] = [m for m in await receive() if isinstance(m, Answer)]
        send([AskProgress(1)])  # answered already: nothing known
        [after] = await receive()
        return progress, answer, after

    progress, answer, after = asyncio.run(_speaking_to_worker(talk))
    assert isinstance(progress, Progress) and progress.request_id == 1 and progress.pending == ("slow",)
    [so_far] = progress.so_far
    assert [(r.name, r.score) for r in so_far.results] == [("quick", 0.75)]  # 3 spans of 4
    assert {a.key: a.value for a in so_far.attributes} == {"eval.quick.sequence": 1}
    [scored] = answer.scored
    assert [(r.name, r.score) for r in scored.results] == [("quick", 0.75), ("slow", 0.75)]
    assert scored.prepared is None  # the trace left: its results follow on the collector's carrier
    assert after == Progress(1, [], ())


def test_a_cancelled_request_stops_its_scoring_in_the_worker_and_is_not_answered():
    async def talk(send, receive, worker):
        send([ScoreTraces(1, (sent_trace(two_origin_trace(), None),))])
        await asyncio.sleep(0.1)
        send([Cancel(1), ScoreTraces(2, (sent_trace(two_origin_trace(), None),))])
        replies = await receive()  # the cancelled one's slow metric would have ended first
        with pytest.raises(AssertionError, match="said nothing"):
            await receive(0.3)
        send([Cancel(2)])  # answered already: nothing to stop
        return replies, worker

    replies, worker = asyncio.run(_speaking_to_worker(talk))
    assert [(type(m), m.request_id) for m in replies] == [(Answer, 2)]
    assert worker._batches == {} and not [task for task in worker._tasks if not task.done()]
