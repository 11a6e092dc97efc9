"""What a client sends cannot forge or flood spanscore's output: the debug exporter prints
each name, session id and error on one line of its own, escaped and cut short."""

from __future__ import annotations

import io

from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import new_span_id, new_trace_id, request_of, span

FORGED = "s1\n2025-01-01 00:00:00,000 ERROR spanscore: disk full\x1b[2J\x1b[31m"


def test_the_debug_exporter_escapes_and_bounds_what_clients_sent(start_collector):
    collector = start_collector("""
receivers: {otlp: {protocols: {grpc: {endpoint: 127.0.0.1:0}}}}
processors: {assembler: {trace_wait: 20ms}}
exporters: {debug: {verbosity: detailed}}
service: {pipelines: {traces: {receivers: [otlp], processors: [assembler], exporters: [debug]}}}
""")
    debug = collector.service.pipeline.exporters[0]
    debug.stream = io.StringIO()
    trace_id, root_id = new_trace_id(), new_span_id()
    send(
        collector.grpc_port,
        request_of(
            [
                span(trace_id, "root\r\u2028\u202e", span_id=root_id, attributes={"session.id": FORGED}),
                span(trace_id, "n" * 2**20, parent=root_id),
            ]
        ),
    )
    assert wait_until(lambda: debug.stream.getvalue().count("\n") >= 3, timeout_s=10)
    collector.stop()
    printed = debug.stream.getvalue()
    lines = printed.splitlines()
    assert len(lines) == 3  # the summary and a line per span: nothing forged
    assert lines[0].startswith(f"trace {trace_id.hex()} root='root\\r\\u2028\\u202e' spans=2 session=s1\\n2025")
    assert "\x1b" not in printed and "\r" not in printed and "\u2028" not in printed and "\u202e" not in printed
    assert "\\x1b[2J\\x1b[31m" in lines[0]
    assert max(len(line) for line in lines) < 500
    assert f"'{'n' * 200}... ({2**20} characters)'" in lines[2]
