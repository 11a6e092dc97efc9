"""The memory limiter at the real receivers: above its limit clients are told to retry
(HTTP 503 + Retry-After, gRPC UNAVAILABLE + RetryInfo), nothing is taken, the refusals
are counted, and a client that retries gets through once memory is back down."""

from __future__ import annotations

import threading
import time
import urllib.request

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from spanscore.pipeline.memory_limiter import MIB
from tests.support.otlp_client import grpc_export, post
from tests.support.ports import free_port
from tests.support.processes import start_run
from tests.support.running import health_check_ok, sink_config, wait_until
from tests.support.sdk_export import export_over_grpc
from tests.support.spans import good_request

PROTOBUF = "application/x-protobuf"


def limited(sink, limiter: str, prometheus_port: int | None = None) -> str:
    text = sink_config(
        sink,
        assembler="trace_wait: 20ms",
        processors="[memory_limiter, assembler]",
        extra_processors=f"  memory_limiter: {{{limiter}}}",
    )
    if prometheus_port is not None:
        text = text.replace("service:\n", f"  prometheus: {{endpoint: 127.0.0.1:{prometheus_port}}}\nservice:\n")
        text += "    metrics: {exporters: [prometheus]}\n"
    return text


def test_a_process_over_the_limit_refuses_with_503_and_unavailable(sink, start_collector):
    prometheus_port = free_port()
    # This process's real memory, read from /proc/self/statm, is far above 1 MiB.
    collector = start_collector(limited(sink, "check_interval: 1s, limit_mib: 1", prometheus_port))
    status, headers, payload = post(collector.http_port, good_request("refused").SerializeToString(), PROTOBUF)
    assert status == 503 and headers["Retry-After"] == "1"
    message = status_pb2.Status.FromString(payload).message
    assert message.startswith("memory use ") and "above the memory_limiter's soft limit of 1 MiB" in message
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, good_request("refused").SerializeToString())
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    details = status_pb2.Status.FromString(dict(error.value.trailing_metadata())["grpc-status-details-bin"]).details
    info = error_details_pb2.RetryInfo()
    assert details[0].Unpack(info) and info.retry_delay.seconds == 1
    assert collector.pipeline.counts.received_spans == 0 and sink.spans() == []

    def refused() -> float | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{prometheus_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}.get(
            "spanscore_memory_limiter_refused_requests_total"
        )

    assert wait_until(lambda: refused() == 2.0)


def test_a_retrying_client_gets_through_once_memory_falls(sink, start_collector):
    collector = start_collector(limited(sink, "check_interval: 10ms, limit_mib: 100, spike_limit_mib: 20"))
    memory = {"rss": 90 * MIB}
    collector.service.memory_limiter.read_rss = lambda: memory["rss"]  # the seam: memory as the test says
    status, _, _ = post(collector.http_port, good_request("refused").SerializeToString(), PROTOBUF)
    assert status == 503

    results = []
    sender = threading.Thread(
        target=lambda: results.append(export_over_grpc(collector.grpc_port, "retried through", timeout_s=10))
    )
    sender.start()
    assert wait_until(lambda: collector.service.memory_limiter.refused_requests >= 2)  # the SDK was refused once
    memory["rss"] = 50 * MIB
    sender.join(15)
    # The SDK exporter waited the RetryInfo delay (1 s) and sent again.
    assert results == [SpanExportResult.SUCCESS]
    assert wait_until(lambda: [s.name for s in sink.spans()] == ["retried through"])
    status, _, _ = post(collector.http_port, good_request("taken").SerializeToString(), PROTOBUF)
    assert status == 200


def test_spanscore_run_refuses_over_the_limit_and_logs_the_crossing_once(tmp_path):
    http_port, health_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{http_port}'}}}}}}}}
processors:
  memory_limiter: {{check_interval: 50ms, limit_mib: 8, spike_limit_mib: 2}}
exporters: {{file: {{path: '{tmp_path / "out.jsonl"}'}}}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health_port}'}}}}
service:
  extensions: [health_check]
  pipelines: {{traces: {{receivers: [otlp], processors: [memory_limiter], exporters: [file]}}}}
""")
    process = start_run(config)
    try:
        assert wait_until(lambda: health_check_ok(health_port), timeout_s=30), "collector did not come up"
        statuses = []
        for _ in range(3):
            statuses.append(post(http_port, good_request("refused").SerializeToString(), PROTOBUF)[0])
            time.sleep(0.06)  # past the check interval: memory is read again each time
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert statuses == [503, 503, 503]
    assert process.returncode == 0, stderr
    assert stderr.count("is above the hard limit of 8 MiB; refusing data") == 1
    assert "received 0 spans" in stderr
    assert (tmp_path / "out.jsonl").read_text() == ""
