"""Sessions, idle close, late spans, ordering and shutdown flush, through real sockets."""

from __future__ import annotations

import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.pipeline.score_attributes import carrier_spans as carrier_resource_spans
from tests.support.otlp_client import send
from tests.support.running import sink_config, wait_until
from tests.support.spans import (
    AGENT_ROOT,
    evaluation_events,
    exported_span,
    new_span_id,
    new_trace_id,
    request_of,
    span,
)
from tests.support.toy_metric import TOY


def session_trace(session_id: str, name: str, children: int = 1):
    trace_id, root_id = new_trace_id(), new_span_id()
    spans = [span(trace_id, name, span_id=root_id, attributes={**AGENT_ROOT, "session.id": session_id})]
    spans += [span(trace_id, f"{name} step {i}", parent=root_id) for i in range(children)]
    return trace_id, root_id, spans


def carrier_spans(sink):
    return [s for s in sink.spans() if s.name == "evaluate_session"]


def test_idle_session_closes_with_a_linked_carrier_span(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler="trace_wait: 50ms, session_idle: 400ms",
        )
    )
    roots = []
    for i in range(3):
        trace_id, root_id, spans = session_trace("chat-7", f"turn {i}")
        roots.append((trace_id, root_id))
        send(collector.grpc_port, request_of(spans, service="support-bot"))
    _, _, other = session_trace("chat-8", "other session")
    send(collector.grpc_port, request_of(other))
    assert wait_until(lambda: len(carrier_spans(sink)) == 2, timeout_s=5)
    [carrier] = [c for c in carrier_spans(sink) if attributes_to_dict(c.attributes)["session.id"] == "chat-7"]
    attributes = attributes_to_dict(carrier.attributes)
    assert attributes["gen_ai.conversation.id"] == "chat-7"
    assert attributes["openinference.span.kind"] == "EVALUATOR"
    assert attributes["eval.toy_session.score"] == 1.0 and attributes["eval.toy_session.label"] == "pass"
    assert evaluation_events(carrier)[0]["gen_ai.evaluation.explanation"] == "3 of 3 traces complete"
    assert sorted((link.trace_id, link.span_id) for link in carrier.links) == sorted(roots)
    assert carrier.trace_id not in {t for t, _ in roots} and not carrier.parent_span_id
    # The carrier keeps the agent's resource so it shows up under the agent's service.
    [resource] = [
        rs.resource
        for r in sink.requests
        for rs in r.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
        if s.span_id == carrier.span_id
    ]
    assert attributes_to_dict(resource.attributes)["service.name"] == "support-bot"


def test_session_stays_open_while_traces_keep_coming(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler="trace_wait: 50ms, session_idle: 600ms",
        )
    )
    for i in range(4):
        send(collector.grpc_port, request_of(session_trace("long", f"turn {i}")[2]))
        time.sleep(0.3)
    assert carrier_spans(sink) == []  # never 600 ms without a new trace
    assert wait_until(lambda: len(carrier_spans(sink)) == 1, timeout_s=5)
    assert len(carrier_spans(sink)[0].links) == 4


def test_traces_of_a_session_are_scored_in_order_with_earlier_traces_visible(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            assembler="trace_wait: 50ms",
            extra_processors="  toy_metric: {delay_s: 0.05}",
        )
    )
    sent = []
    for i in range(4):
        trace_id, _, spans = session_trace("ordered", f"turn {i}")
        sent.append(trace_id)
        send(collector.grpc_port, request_of(spans))
        time.sleep(0.01)
    send(collector.grpc_port, request_of([span(new_trace_id(), "no session", attributes=AGENT_ROOT)]))
    assert wait_until(lambda: len(sink.spans()) == 9)
    toy = collector.service.pipeline.processors[0][1]
    in_session = [(earlier, trace_id) for session_id, earlier, trace_id in toy.seen if session_id == "ordered"]
    assert in_session == [(i, trace_id) for i, trace_id in enumerate(sent)]
    assert [s for s, _, _ in toy.seen].count(None) == 1


def test_late_spans_are_forwarded_as_they_came_and_rescore_their_trace_on_a_carrier(sink, start_collector):
    collector = start_collector(
        sink_config(sink, processors="[assembler, toy_metric]", extra_processors=TOY, assembler="trace_wait: 50ms")
    )
    trace_id, root_id, spans = session_trace("s", "agent")
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) == 2)
    send(collector.grpc_port, request_of([span(trace_id, "straggler", parent=root_id)]))
    assert wait_until(lambda: len(sink.spans()) == 4)
    straggler = exported_span(sink, "straggler")
    assert straggler.trace_id == trace_id and not straggler.events
    assert len(evaluation_events(exported_span(sink, "agent"))) == 1
    carrier = exported_span(sink, "evaluate_trace")
    assert carrier.trace_id == trace_id and carrier.parent_span_id == root_id
    assert attributes_to_dict(carrier.attributes)["eval.toy.sequence"] == 2


def test_shutdown_flushes_buffered_traces_and_open_sessions(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler="trace_wait: 1h, trace_timeout: 2h, session_idle: 3h",
        )
    )
    send(collector.grpc_port, request_of(session_trace("pending", "turn 0", children=2)[2]))
    send(collector.grpc_port, request_of([span(new_trace_id(), "orphan", parent=new_span_id(), attributes=AGENT_ROOT)]))
    time.sleep(0.2)
    assert sink.spans() == []  # nothing is ready for an hour
    started = time.monotonic()
    collector.stop()
    assert time.monotonic() - started < 5
    names = sorted(s.name for s in sink.spans())
    assert names == ["evaluate_session", "orphan", "turn 0", "turn 0 step 0", "turn 0 step 1"]
    assert attributes_to_dict(exported_span(sink, "orphan").attributes)["eval.toy.score"] == 0.25
    assert collector.pipeline.counts.held_spans == 0


def test_open_sessions_are_bounded_by_closing_the_least_recently_active(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler="trace_wait: 50ms, session_idle: 1h, max_open_sessions: 2",
        )
    )
    for session_id in ("first", "second", "third"):
        send(collector.grpc_port, request_of(session_trace(session_id, f"{session_id} turn")[2]))
        time.sleep(0.15)
    assert wait_until(lambda: len(carrier_spans(sink)) == 1)
    [carrier] = carrier_spans(sink)
    assert attributes_to_dict(carrier.attributes)["session.id"] == "first"
    assert sorted(collector.pipeline.sessions.open) == ["second", "third"]


def test_sessions_are_not_kept_when_no_processor_reads_them(sink, start_collector):

    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, record_agent]",
            extra_processors="  record_agent: {}",
            assembler="trace_wait: 50ms",
        )
    )
    send(collector.grpc_port, request_of(session_trace("unread", "turn")[2]))
    assert wait_until(lambda: len(sink.spans()) == 2)
    assert collector.pipeline.sessions.open == {} and carrier_spans(sink) == []


@pytest.mark.parametrize("workers", [0, 1])
def test_a_carrier_that_arrives_while_its_session_is_open_is_replaced_by_the_new_one(workers, sink, start_collector):
    # A second spanscore downstream of another: the first one's carrier of the session
    # arrives after the session's traces, while this one holds the session open.
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler=f"trace_wait: 50ms, session_idle: 1s, scoring_workers: {workers}",
        )
    )
    trace_id, root_id, spans = session_trace("chat-9", "turn 0")
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) == 2)
    old = Provenance("old-judge", "000000000000")
    earlier = carrier_resource_spans(
        "chat-9",
        Resource(),
        [(trace_id, root_id)],
        [MetricResult(name="toy_session", score=0.2), MetricResult(name="retired", score=0.3)],
        1_000,
        2_000,
        "0.0.1",
        {"toy_session": old, "retired": old},
    )
    send(collector.grpc_port, ExportTraceServiceRequest(resource_spans=[earlier]))

    def new_carrier_sent() -> bool:  # an earlier carrier forwarded would have arrived before it
        return any(
            attributes_to_dict(c.attributes)["eval.toy_session.evaluator"] == "code" for c in carrier_spans(sink)
        )

    assert wait_until(new_carrier_sent, timeout_s=10)
    [carrier] = carrier_spans(sink)
    assert carrier.span_id != earlier.scope_spans[0].spans[0].span_id
    keys = [a.key for a in carrier.attributes]
    assert len(keys) == len(set(keys))
    attributes = attributes_to_dict(carrier.attributes)
    assert (attributes["eval.toy_session.score"], attributes["eval.toy_session.evaluator"]) == (1.0, "code")
    # The earlier carrier's result of a metric not scored here is carried over, once.
    assert (attributes["eval.retired.score"], attributes["eval.retired.evaluator"]) == (0.3, "old-judge")
    events = {e["gen_ai.evaluation.name"]: e for e in evaluation_events(carrier)}
    assert len(events) == len(evaluation_events(carrier)) == 2
    assert (events["toy_session"]["eval.evaluator"], events["toy_session"]["eval.revision"]) == (
        "code",
        CODE_PROVENANCE.revision,
    )
    assert events["retired"]["eval.revision"] == "000000000000"
    assert [(link.trace_id, link.span_id) for link in carrier.links] == [(trace_id, root_id)]
