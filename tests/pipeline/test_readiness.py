"""When a trace is ready, over OTLP: it waits for a local parent that has not arrived and
for services that export late, and `trace_timeout` still bounds every wait.

The collector scores with the toy metric (score = spans / 4), so the score on the
exported root says how many spans the trace had when it was scored.
"""

from __future__ import annotations

import time

from spanscore.core.attributes import attributes_to_dict
from tests.support.otlp_client import send
from tests.support.running import sink_config, wait_until
from tests.support.spans import AGENT_ROOT, exported_span, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import TOY

LOCAL_PARENT = 0x100  # trace.proto: the parent's is_remote is known, and false
REMOTE_PARENT = 0x300  # known, and true


def scoring_collector(start_collector, sink, assembler: str):
    return start_collector(
        sink_config(sink, processors="[assembler, toy_metric]", extra_processors=TOY, assembler=assembler)
    )


def with_flags(s, flags: int):
    s.flags = flags
    return s


def exported_score(sink, name: str) -> float:
    return attributes_to_dict(exported_span(sink, name).attributes)["eval.toy.score"]


def test_a_child_that_arrives_before_its_parent_holds_the_trace_until_the_parent_comes(sink, start_collector):
    collector = scoring_collector(start_collector, sink, "trace_wait: 100ms, trace_timeout: 20s")
    trace_id, root_id, parent_id = new_trace_id(), new_span_id(), new_span_id()
    send(
        collector.grpc_port,
        request_of(
            [
                with_flags(span(trace_id, "query orders db", parent=parent_id), LOCAL_PARENT),
                span(trace_id, "invoke_agent support", span_id=root_id, attributes=AGENT_ROOT),
            ]
        ),
    )
    time.sleep(0.8)  # eight times trace_wait: without the parent, ready long ago
    assert sink.spans() == []
    send(
        collector.grpc_port,
        request_of([with_flags(span(trace_id, "tools/call", parent=root_id, span_id=parent_id), LOCAL_PARENT)]),
    )
    assert wait_until(lambda: len(sink.spans()) == 3)
    assert exported_score(sink, "invoke_agent support") == 0.75  # scored once, with all three spans
    assert len(sink.requests) == 1


def test_a_parent_of_unknown_remoteness_is_waited_for_as_a_local_one(sink, start_collector):
    # Producers before OTLP 1.1 leave the flags unset: the parent may be local, so it is awaited.
    collector = scoring_collector(start_collector, sink, "trace_wait: 100ms, trace_timeout: 20s")
    trace_id, root_id, parent_id = new_trace_id(), new_span_id(), new_span_id()
    send(
        collector.grpc_port,
        request_of(
            [
                span(trace_id, "query orders db", parent=parent_id),
                span(trace_id, "invoke_agent support", span_id=root_id, attributes=AGENT_ROOT),
            ]
        ),
    )
    time.sleep(0.8)
    assert sink.spans() == []
    send(collector.grpc_port, request_of([span(trace_id, "tools/call", parent=root_id, span_id=parent_id)]))
    assert wait_until(lambda: len(sink.spans()) == 3)
    assert exported_score(sink, "invoke_agent support") == 0.75


def test_a_span_whose_parent_is_remote_does_not_hold_the_trace(sink, start_collector):
    collector = scoring_collector(start_collector, sink, "trace_wait: 100ms, trace_timeout: 20s")
    trace_id, root_id = new_trace_id(), new_span_id()
    started = time.monotonic()
    send(
        collector.grpc_port,
        request_of(
            [
                span(trace_id, "invoke_agent support", span_id=root_id, attributes=AGENT_ROOT),
                with_flags(span(trace_id, "retrieve documents", parent=new_span_id()), REMOTE_PARENT),
            ]
        ),
    )
    assert wait_until(lambda: len(sink.spans()) == 2, timeout_s=10)
    assert time.monotonic() - started < 10  # released after trace_wait, not at the 20 s timeout
    assert exported_score(sink, "invoke_agent support") == 0.5


def test_a_trace_with_a_span_of_a_late_service_waits_that_services_wait(sink, start_collector):
    collector = scoring_collector(
        start_collector, sink, "trace_wait: 100ms, trace_timeout: 20s, trace_wait_by_service: {tool-server: 1500ms}"
    )
    slow_trace, slow_root, fast_trace = new_trace_id(), new_span_id(), new_trace_id()
    send(
        collector.grpc_port,
        request_of([span(slow_trace, "invoke_agent slow", span_id=slow_root, attributes=AGENT_ROOT)]),
    )
    send(
        collector.grpc_port,
        request_of(
            [with_flags(span(slow_trace, "tools/call", parent=slow_root), REMOTE_PARENT)], service="tool-server"
        ),
    )
    send(collector.grpc_port, request_of([span(fast_trace, "invoke_agent fast", attributes=AGENT_ROOT)]))
    started = time.monotonic()
    assert wait_until(lambda: len(sink.spans()) == 1)  # the agent-only trace: after trace_wait
    assert exported_span(sink, "invoke_agent fast")
    time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    assert len(sink.spans()) == 1  # the tool server's trace still waits
    send(
        collector.grpc_port,
        request_of(
            [with_flags(span(slow_trace, "format result", parent=slow_root), REMOTE_PARENT)], service="tool-server"
        ),
    )
    assert wait_until(lambda: len(sink.spans()) == 4)
    assert exported_score(sink, "invoke_agent slow") == 0.75  # scored once, with the late span


def test_trace_timeout_bounds_a_trace_whose_parent_never_comes(sink, start_collector):
    collector = scoring_collector(
        start_collector, sink, "trace_wait: 100ms, trace_timeout: 1500ms, trace_wait_by_service: {agent: 1s}"
    )
    trace_id, root_id = new_trace_id(), new_span_id()
    started = time.monotonic()
    send(
        collector.grpc_port,
        request_of(
            [
                with_flags(span(trace_id, "orphan step", parent=new_span_id()), LOCAL_PARENT),
                span(trace_id, "invoke_agent support", span_id=root_id, attributes=AGENT_ROOT),
            ]
        ),
    )
    # New spans keep the service wait from ending; the timeout still releases it.
    for _ in range(4):
        time.sleep(0.3)
        send(collector.grpc_port, request_of([span(trace_id, "step", parent=root_id)]))
    assert wait_until(lambda: len(sink.spans()) >= 6, timeout_s=10)
    elapsed = time.monotonic() - started
    assert 1.4 < elapsed < 5
    assert exported_score(sink, "invoke_agent support") == 1.0
