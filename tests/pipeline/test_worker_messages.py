"""The scoring workers' messages: each survives the pipe's pickling whole, and a side
that gets a message it has no use for says so and goes on."""

from __future__ import annotations

import asyncio
import logging
import pickle

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
    CloseSession,
    JudgesReport,
    Observed,
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
