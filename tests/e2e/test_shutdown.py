"""A stop keeps `service.shutdown_timeout` and loses nothing it holds, through real processes.

`spanscore run` processes on loopback: clients that stop in the middle of a request.
SIGTERM is sent and the seconds to exit are measured; what the file exporter wrote and
the log says is read back.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import grpc
import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.otlp_client import EXPORT, send
from tests.support.otlp_json import read_requests
from tests.support.ports import free_port
from tests.support.processes import launch
from tests.support.running import wait_until
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span


def session_turn(session_id: str, turn: int) -> tuple[bytes, list]:
    trace_id, root = new_trace_id(), new_span_id()
    attributes = {
        **AGENT_ROOT,
        "session.id": session_id,
        "gen_ai.input.messages": f'[{{"role": "user", "content": "question {turn} of {session_id}"}}]',
        "gen_ai.output.messages": f'[{{"role": "assistant", "content": "answer {turn} of {session_id}"}}]',
    }
    return trace_id, [span(trace_id, "invoke_agent", span_id=root, attributes=attributes)]


def stop(process: subprocess.Popen, within_s: float) -> tuple[float, str]:
    """SIGTERM; the seconds until it exited (0) and its log. Fails past `within_s`."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=within_s + 10)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate(timeout=10)
        raise AssertionError(f"still running {within_s + 10:.0f}s after SIGTERM:\n{stderr[-3000:]}") from None
    took = time.monotonic() - started
    assert process.returncode == 0, stderr[-3000:]
    assert took < within_s, f"took {took:.1f}s to stop:\n{stderr[-3000:]}"
    return took, stderr


def written(path: Path) -> dict[bytes, list[dict]]:
    """The attributes of every exported root span (and carrier) by trace id, one per copy."""
    copies: dict[bytes, list[dict]] = {}
    for request in read_requests(path):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for exported in scope_spans.spans:
                    if not exported.parent_span_id:
                        copies.setdefault(exported.trace_id, []).append(attributes_to_dict(exported.attributes))
    return copies


HALF_OPEN_CONFIG = """
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{grpc}'}}
      http: {{endpoint: '127.0.0.1:{http}'}}
processors:
  assembler: {{trace_wait: 100ms}}
  embedding_metrics: {{embedder: {{type: static}}}}
  session_metrics: {{}}
exporters:
  file: {{path: '{output}'}}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
service:
  shutdown_timeout: {timeout}
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [file]}}
    metrics: {{exporters: [prometheus]}}
"""


def half_open_http(port: int) -> socket.socket:
    """A client that sent its headers and 10 of the 1000 bytes of body it announced."""
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: spanscore\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: 1000\r\n\r\n" + b"\n" * 10
    )
    return client


def half_open_grpc(port: int) -> tuple[grpc.Channel, threading.Event]:
    """A stream opened with its headers and no message, held open until the event is set."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    release = threading.Event()

    def nothing_yet():
        release.wait()
        yield b""

    channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None).future(nothing_yet())
    return channel, release


@pytest.mark.parametrize("timeout", ["5s", "2s"])
def test_clients_stopped_mid_request_do_not_hold_the_stop_past_shutdown_timeout(tmp_path, timeout):
    grpc_port, http_port, output = free_port(), free_port(), tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(
        HALF_OPEN_CONFIG.format(grpc=grpc_port, http=http_port, output=output, prometheus=free_port(), timeout=timeout)
    )
    collector = launch(config, grpc_port)
    traces = []
    for turn in range(2):  # a session left open for the stop to close
        trace_id, spans = session_turn("chat-9", turn)
        traces.append(trace_id)
        send(grpc_port, request_of(spans))
    assert wait_until(lambda: output.exists() and all(t in written(output) for t in traces), timeout_s=10)
    http_client = half_open_http(http_port)
    channel, release = half_open_grpc(grpc_port)
    time.sleep(0.5)  # both are in the receivers' hands
    try:
        took, stderr = stop(collector, within_s=float(timeout[:-1]) + 1)
    finally:
        release.set()
        channel.close()
        http_client.close()
    assert "Traceback" not in stderr
    [carrier] = [a for c in written(output).values() for a in c if "eval.session.trace_count" in a]
    assert carrier["eval.session.trace_count"] == 2 and "eval.agent_reliability.score" in carrier
    print(f"half-open HTTP and gRPC clients, shutdown_timeout {timeout}: stopped {took:.1f}s after SIGTERM")
