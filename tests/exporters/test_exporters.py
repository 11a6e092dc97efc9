"""Exporters: retries as OTLP defines them, the file format, the debug summary."""

from __future__ import annotations

import io
import json
import time

import grpc
import pytest

from spanscore.core.otlp_json import decode_request
from tests.support.otlp_client import post, send
from tests.support.otlp_sink import Fault
from tests.support.running import sink_config, wait_until
from tests.support.spans import (
    AGENT_ROOT,
    assert_forwarded_faithfully,
    every_field_request,
    new_span_id,
    new_trace_id,
    request_of,
    span,
    spans_with_context,
)
from tests.support.toy_metric import TOY


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_retryable_failures_are_retried_until_delivered(exporter, sink, start_collector):
    sink.faults = [Fault(grpc.StatusCode.UNAVAILABLE, 503), Fault(grpc.StatusCode.UNAVAILABLE, 502)]
    collector = start_collector(sink_config(sink, exporter=exporter, assembler="trace_wait: 20ms"))
    send(collector.grpc_port, request_of([span(new_trace_id(), "persistent")]))
    assert wait_until(lambda: [s.name for s in sink.spans()] == ["persistent"])
    assert sink.attempts == 3
    assert collector.service.pipeline.exporters[0].dropped_spans == 0


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_server_requested_delay_is_honoured(exporter, sink, start_collector):
    sink.faults = [Fault(grpc.StatusCode.RESOURCE_EXHAUSTED, 429, retry_after_s=1.0)]
    collector = start_collector(sink_config(sink, exporter=exporter, assembler="trace_wait: 20ms"))
    sent = time.monotonic()
    send(collector.grpc_port, request_of([span(new_trace_id(), "throttled")]))
    assert wait_until(lambda: len(sink.spans()) == 1)
    assert time.monotonic() - sent >= 1.0  # not the 50 ms initial backoff of the config
    assert sink.attempts == 2


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_permanent_failures_are_dropped_and_counted_not_retried(exporter, sink, start_collector, caplog):
    sink.faults = [Fault(grpc.StatusCode.INVALID_ARGUMENT, 400)]
    collector = start_collector(sink_config(sink, exporter=exporter, assembler="trace_wait: 20ms"))
    send(collector.grpc_port, request_of([span(new_trace_id(), "refused")]))
    exporter_component = collector.service.pipeline.exporters[0]
    assert wait_until(lambda: exporter_component.dropped_spans == 1)
    assert sink.attempts == 1 and collector.pipeline.counts.held_spans == 0
    assert "not retryable" in caplog.text
    send(collector.grpc_port, request_of([span(new_trace_id(), "next one")]))
    assert wait_until(lambda: [s.name for s in sink.spans()] == ["next one"])


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_spans_a_backend_rejects_in_a_partial_success_are_logged_once_quoted(exporter, sink, start_collector, caplog):
    sink.answer.partial_success.rejected_spans = 1
    sink.answer.partial_success.error_message = "span too large\x1b[2J"
    collector = start_collector(sink_config(sink, exporter=exporter, assembler="trace_wait: 20ms"))
    send(collector.grpc_port, request_of([span(new_trace_id(), "half taken")]))
    assert wait_until(lambda: "backend rejected" in caplog.text)
    rejected = [r.getMessage() for r in caplog.records if "backend rejected" in r.getMessage()]
    assert len(rejected) == 1 and rejected[0].endswith("backend rejected 1 spans: span too large\\x1b[2J")
    assert collector.service.pipeline.exporters[0].dropped_spans == 0  # a partial success is no failure


def test_shutdown_gives_up_on_a_dead_backend_at_the_deadline(sink, start_collector):
    sink.faults = [Fault(grpc.StatusCode.UNAVAILABLE)] * 1000
    config = sink_config(sink, assembler="trace_wait: 20ms").replace("shutdown_timeout: 10s", "shutdown_timeout: 1s")
    collector = start_collector(config)
    send(collector.grpc_port, request_of([span(new_trace_id(), "doomed")]))
    assert wait_until(lambda: sink.attempts >= 2)
    started = time.monotonic()
    collector.stop()
    assert time.monotonic() - started < 3
    assert collector.service.pipeline.exporters[0].dropped_spans == 1


def test_file_lines_are_otlp_json_requests_the_http_receiver_accepts(tmp_path, sink, start_collector):
    path = tmp_path / "out" / "scored.jsonl"
    writer = start_collector(f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
{TOY}
exporters: {{file: {{path: {path}}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler, toy_metric], exporters: [file]}}}}}}
""")
    sent = every_field_request()
    send(writer.grpc_port, sent)
    assert wait_until(lambda: path.exists() and path.read_text().count("\n") >= 1)
    writer.stop()
    lines = path.read_text().splitlines()
    for line in lines:
        document = json.loads(line)
        span_json = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(span_json["traceId"]) == 32 and int(span_json["traceId"], 16)  # hex, not base64
        assert isinstance(span_json["kind"], int)
    assert_forwarded_faithfully([sent], [decode_request(line) for line in lines])

    replay = start_collector(sink_config(sink, assembler="trace_wait: 20ms"))
    for line in lines:
        status, _, _ = post(replay.http_port, line.encode(), "application/json")
        assert status == 200
    assert wait_until(lambda: len(sink.spans()) == 3)
    replayed = spans_with_context(sink.requests)
    for span_id, (written, _, _) in spans_with_context([decode_request(line) for line in lines]).items():
        assert replayed[span_id][0] == written  # scores included: the replay pipeline adds none


def test_debug_exporter_prints_one_summary_line_per_trace(start_collector):
    collector = start_collector(f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
{TOY}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler, toy_metric], exporters: [debug]}}}}}}
""")
    debug = collector.service.pipeline.exporters[0]
    debug.stream = io.StringIO()
    trace_id, root_id = new_trace_id(), new_span_id()
    send(
        collector.grpc_port,
        request_of(
            [
                span(trace_id, "invoke_agent", span_id=root_id, attributes={**AGENT_ROOT, "session.id": "s9"}),
                span(trace_id, "chat", parent=root_id),
            ]
        ),
    )
    orphan = new_trace_id()
    send(collector.grpc_port, request_of([span(orphan, "half", parent=new_span_id(), attributes=AGENT_ROOT)]))
    assert wait_until(lambda: debug.stream.getvalue().count("\n") >= 1)
    collector.stop()
    lines = debug.stream.getvalue().splitlines()
    assert f"trace {trace_id.hex()} root='invoke_agent' spans=2 session=s9 scores: toy=0.50 pass" in lines
    assert f"trace {orphan.hex()} first='half' spans=1 (incomplete: no root span) scores: toy=0.25 fail" in lines


def queue_config(sink, sending_queue: str) -> str:
    return sink_config(sink, assembler="trace_wait: 20ms").replace(
        "retry_on_failure: {", f"sending_queue: {sending_queue}, retry_on_failure: {{", 1
    )


def send_trace(collector, name: str) -> None:
    trace_id = new_trace_id()
    send(collector.grpc_port, request_of([span(trace_id, name), span(trace_id, f"{name} child")]))


def test_a_send_waits_for_batch_min_spans_up_to_the_flush_timeout(sink, start_collector):
    collector = start_collector(queue_config(sink, "{batch_min_spans: 6, batch_flush_timeout: 1s}"))
    for name in ("a", "b", "c"):  # 2 spans each, ready one after the other
        send_trace(collector, name)
        time.sleep(0.1)
    assert wait_until(lambda: len(sink.spans()) == 6)
    assert sink.attempts == 1  # the sixth span filled the batch: one send
    sent = time.monotonic()
    send_trace(collector, "d")  # alone: waits for the flush timeout
    assert wait_until(lambda: len(sink.spans()) == 8, timeout_s=5)
    assert time.monotonic() - sent >= 0.9
    assert sink.attempts == 2


def test_a_flush_timeout_of_zero_sends_what_is_waiting_at_once(sink, start_collector):
    collector = start_collector(queue_config(sink, "{batch_min_spans: 1000, batch_flush_timeout: 0s}"))
    for count, name in enumerate(("a", "b", "c"), 1):
        send_trace(collector, name)
        assert wait_until(lambda count=count: len(sink.spans()) == 2 * count, timeout_s=2)
    assert sink.attempts == 3
