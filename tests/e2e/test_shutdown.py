"""A stop keeps `service.shutdown_timeout` and loses nothing it holds, through real processes.

`spanscore run` processes on loopback: a judge that accepts requests and never answers,
clients that stop in the middle of a request, a backend that takes a request and answers
after the deadline. SIGTERM is sent and the seconds to exit are measured; what the file
exporter wrote, the backend received and the log says is read back.
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
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_client import EXPORT, send
from tests.support.otlp_json import read_requests
from tests.support.ports import free_port
from tests.support.processes import launch
from tests.support.running import wait_until
from tests.support.spans import AGENT_ROOT, agent_request, new_span_id, new_trace_id, request_of, span

SESSION_METRICS = ("agent_reliability", "agent_consistency")


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


JUDGE_CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms}}
  judge_metrics: {{judge: {{model: judge-test, base_url: '{judge}', api_key: test-key}}}}
  session_metrics: {{}}
exporters:
  file: {{path: '{output}'}}
extensions:
  file_storage: {{directory: '{storage}'}}
service:
  extensions: [file_storage]
  shutdown_timeout: 6s
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, judge_metrics, session_metrics], exporters: [file]}}
"""


def test_a_judge_that_never_answers_costs_no_trace_at_sigterm_and_the_next_start_scores_them(tmp_path):
    judge = OpenAIServer(handler=schema_judge(score=0.8))
    judge.chat_latency_s = 3600.0  # accepts every request and never answers
    judge.start()
    port, output = free_port(), tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(JUDGE_CONFIG.format(port=port, judge=judge.base_url, output=output, storage=tmp_path / "storage"))
    try:
        collector = launch(config, port)
        sessions: dict[str, list[bytes]] = {}
        for turn in range(2):
            for session_id in ("chat-1", "chat-2", "chat-3"):
                trace_id, spans = session_turn(session_id, turn)
                sessions.setdefault(session_id, []).append(trace_id)
                send(port, request_of(spans))
        # The first turn of each session waits on the judge (two requests in flight, where
        # the judge's adaptive limit starts; the rest queue for a slot); the second waits its turn.
        assert wait_until(lambda: len(judge.requests) >= 2, timeout_s=10)
        took, stderr = stop(collector, within_s=6 + 1)

        copies = written(output)
        traces = [trace_id for turns in sessions.values() for trace_id in turns]
        for trace_id in traces:
            [attributes] = copies[trace_id]
            skipped = {k: v for k, v in attributes.items() if k.endswith(".skipped")}
            assert set(skipped) == {f"eval.{m}.skipped" for m in METRIC_NAMES}, attributes
            assert all("shutdown_export_reserve" in why for why in skipped.values()), skipped
            assert not [k for k in attributes if k.endswith((".score", ".error"))], attributes
        carriers = {a["session.id"]: a for c in copies.values() for a in c if "eval.session.trace_count" in a}
        assert sorted(carriers) == sorted(sessions)
        for carrier in carriers.values():  # scored, or skipped saying why
            assert {m for m in SESSION_METRICS if f"eval.{m}.score" in carrier or f"eval.{m}.error" in carrier} | {
                m for m in SESSION_METRICS if f"eval.{m}.skipped" in carrier
            } == set(SESSION_METRICS), carrier
            assert carrier["eval.session.trace_count"] == 2
        assert "dropping" not in stderr
        print(f"hanging judge: stopped {took:.1f}s after SIGTERM, {len(traces)} of {len(traces)} traces written")

        # Kept in the write-ahead log: the next start, with the judge answering, scores them.
        judge.chat_latency_s = 0.0
        collector = launch(config, port)

        def scored() -> bool:
            copies = written(output)
            return all(any("eval.task_completion.score" in a for a in copies.get(t, [])) for t in traces)

        assert wait_until(scored, timeout_s=60)
        _, stderr = stop(collector, within_s=6 + 1)
    finally:
        judge.stop()
    assert "replayed" in stderr
    copies = written(output)
    for trace_id in traces:
        first, again = copies[trace_id]  # unscored at the stop, scored after the start
        assert again["eval.task_completion.score"] == 0.8 and "eval.task_completion.skipped" in first
    rebuilt = [a for c in copies.values() for a in c if "eval.agent_reliability.score" in a]
    assert sorted(a["session.id"] for a in rebuilt) == sorted(sessions)
    assert len(list((tmp_path / "storage").glob("*.wal"))) == 1  # all done with


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


WRITE_AHEAD_CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms}}
exporters:
  otlphttp:
    endpoint: 'http://127.0.0.1:{sink}'
    timeout: {timeout}
    retry_on_failure: {{initial_interval: 200ms, max_elapsed_time: 1s}}
extensions:
  file_storage: {{directory: '{storage}'}}
service:
  extensions: [file_storage]
  shutdown_timeout: 2s
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler], exporters: [otlphttp]}}
"""


@pytest.mark.parametrize(
    "timeout", ["10s", "300ms"], ids=["cut off by the shutdown deadline", "answered past the exporter's timeout"]
)
def test_spans_the_write_ahead_log_keeps_are_not_called_dropped_and_come_again_after_a_restart(tmp_path, sink, timeout):
    sink.answer_after_s = 3.0  # takes each request at once, answers after the deadline
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(
        WRITE_AHEAD_CONFIG.format(port=port, sink=sink.http_port, timeout=timeout, storage=tmp_path / "storage")
    )
    collector = launch(config, port)
    request = agent_request(turns=2)
    send(port, request)
    sent = {s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert wait_until(lambda: {s.span_id for s in sink.spans()} == sent, timeout_s=10)  # delivered
    if timeout == "300ms":
        time.sleep(2.0)  # past the retry budget: the exporter gave up before the stop
    _, stderr = stop(collector, within_s=2 + 1)
    assert "dropping" not in stderr and "dropped 0 spans" in stderr
    assert f"{len(sent)} spans" in stderr and "the write-ahead log keeps them" in stderr

    sink.answer_after_s = 0.0
    before = len(sink.spans())
    collector = launch(config, port)
    assert wait_until(lambda: len(sink.spans()) >= before + len(sent), timeout_s=10)
    stop(collector, within_s=2 + 1)
    received = [s.span_id for s in sink.spans()]
    assert set(received) == sent  # at least once
    print(f"{len(sent)} spans delivered, {len(received) - len(sent)} duplicates after the restart")
