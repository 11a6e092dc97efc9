"""The memory limiter at the real receivers: above its limit clients are told to retry
(HTTP 503 + Retry-After, gRPC UNAVAILABLE + RetryInfo), nothing is taken, the refusals
are counted, and a client that retries gets through once memory is back down."""

from __future__ import annotations

import gzip
import math
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client.parser import text_string_to_metric_families

from spanscore.core.otlp_json import encode_request
from spanscore.pipeline.memory_limiter import MIB
from tests.support.otlp_client import grpc_export, gzip_bomb, post
from tests.support.ports import free_port
from tests.support.processes import rss_mib, start_run
from tests.support.running import health_check_ok, sink_config, wait_until
from tests.support.sdk_export import export_over_grpc
from tests.support.spans import agent_request, good_request

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


def test_the_receivers_count_decoding_before_they_decode(sink, start_collector):
    collector = start_collector(limited(sink, "check_interval: 10ms, limit_mib: 100, spike_limit_mib: 20"))
    limiter = collector.service.memory_limiter
    limiter.read_rss = lambda: 40 * MIB  # the seam: memory as the test says
    limiter.start_rss_bytes = 40 * MIB  # a request may take 80 - 40 MiB at most

    def request_of_mib(mib: float) -> ExportTraceServiceRequest:
        one = agent_request(turns=4)
        request = ExportTraceServiceRequest()
        request.resource_spans.extend(list(one.resource_spans) * math.ceil(mib * MIB / one.ByteSize()))
        return request

    big = request_of_mib(11)  # x4 to decode: 44 MiB, never fits
    data = big.SerializeToString()
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, data)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than the memory_limiter can give one request (40 MiB" in error.value.details()
    # Gzip hides the size until the body is inflated: counted as it grows.
    status, _, payload = post(collector.http_port, gzip.compress(data, 1), PROTOBUF, encoding="gzip")
    assert status == 413 and "can give one request" in status_pb2.Status.FromString(payload).message
    # 5 MiB x 4 fits the limit, not the memory free now: retry.
    limiter.read_rss = lambda: 70 * MIB
    fits = request_of_mib(5)
    time.sleep(0.02)
    status, headers, payload = post(collector.http_port, fits.SerializeToString(), PROTOBUF)
    assert status == 503 and headers["Retry-After"] == "1"
    assert "leave no room for this one's" in status_pb2.Status.FromString(payload).message
    limiter.read_rss = lambda: 40 * MIB
    time.sleep(0.02)
    assert post(collector.http_port, fits.SerializeToString(), PROTOBUF)[0] == 200
    assert (limiter.too_costly_requests, limiter.reserved_bytes) == (2, 0)


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


LIMIT_MIB = 400


def json_body(megabytes: float) -> bytes:
    """An OTLP/JSON request of about `megabytes`: one small request's resourceSpans repeated."""
    one = encode_request(agent_request(turns=8)).encode()
    resource_spans = one[one.index(b"[") + 1 : one.rindex(b"]")]
    copies = round(megabytes * 1e6 / len(resource_spans))
    return b'{"resourceSpans":[' + b",".join([resource_spans] * copies) + b"]}"


def post_json(port: int, body: bytes, retry_until: float) -> tuple[int, str, int]:
    """POST until the answer is not 503 (waiting Retry-After) or `retry_until` passes:
    (status, message, attempts)."""
    attempts = 0
    while True:
        attempts += 1
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, "", attempts
        except urllib.error.HTTPError as error:
            payload = error.read()
            if error.code != 503 or time.monotonic() > retry_until:
                return error.code, payload.decode(), attempts
            time.sleep(float(error.headers["Retry-After"]))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def eight_at_once(port: int, body: bytes, retry_s: float) -> list[tuple[int, str, int]]:
    """Eight clients POST `body` at once, retrying 503s for up to `retry_s`."""
    results: list[tuple[int, str, int]] = []
    retry_until = time.monotonic() + retry_s
    clients = [threading.Thread(target=lambda: results.append(post_json(port, body, retry_until))) for _ in range(8)]
    for client in clients:
        client.start()
    for client in clients:
        client.join(retry_s + 60)
    return results


def start_limited(tmp_path) -> tuple[subprocess.Popen, int]:
    """`spanscore run` with a 400 MiB memory_limiter, once it is up: (process, HTTP port)."""
    http_port, health_port = free_port(), free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{http_port}'}}}}}}}}
processors:
  memory_limiter: {{limit_mib: {LIMIT_MIB}}}
  assembler: {{trace_wait: 100ms}}
exporters: {{file: {{path: '{tmp_path / "out.jsonl"}'}}}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health_port}'}}}}
service:
  extensions: [health_check]
  pipelines: {{traces: {{receivers: [otlp], processors: [memory_limiter, assembler], exporters: [file]}}}}
""")
    process = start_run(config)
    if not wait_until(lambda: health_check_ok(health_port), timeout_s=30):
        process.kill()
        raise AssertionError(f"collector did not come up: {process.communicate(timeout=10)[1]}")
    return process, http_port


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(10)


def test_bodies_too_costly_to_decode_are_refused_before_they_are_read(tmp_path):
    """Limit 400 MiB: eight 60 MB JSON bodies at once, each ~480 MiB to read and decode,
    are refused for good (413) before they are read; peak RSS stays within limit_mib
    (margin: none; the soft limit is 320 MiB)."""
    body = json_body(60)
    process, port = start_limited(tmp_path)
    try:
        results = eight_at_once(port, body, retry_s=0)
        peak = peak_rss_mib(process.pid)
    finally:
        stop(process)
    assert [status for status, _, _ in results] == [413] * 8
    assert "more than the memory_limiter can give one request" in results[0][1]
    assert peak <= LIMIT_MIB, f"peak RSS {peak:.0f} MiB"


@pytest.mark.slow
def test_bodies_that_fit_are_taken_a_few_at_a_time_within_the_limit(tmp_path):
    """Limit 400 MiB: eight 12 MB JSON bodies at once (~96 MiB each to read and decode)
    are all taken as clients retry, a few at a time; peak RSS stays within limit_mib
    (margin: none). About 30 s."""
    body = json_body(12)
    process, port = start_limited(tmp_path)
    try:
        # Clients retry for up to 90 s: about 30 s on an idle machine, longer on a loaded one.
        results = eight_at_once(port, body, retry_s=90)
        peak = peak_rss_mib(process.pid)
    finally:
        stop(process)
    assert [status for status, _, _ in results] == [200] * 8
    assert max(attempts for _, _, attempts in results) > 1  # some were told to come back
    assert peak <= LIMIT_MIB, f"peak RSS {peak:.0f} MiB"


def test_refused_gzip_bombs_leave_no_memory_behind(tmp_path):
    """Limit 400 MiB: eight gzip bombs (128 MiB inflated each) are refused as they inflate
    past what one request may take; what each had inflated is freed with its refusal, so
    memory grows by less than 100 MiB and a legitimate request sent next is taken (within
    the memory limiter's next reading). Kept until a cyclic collection, as they were,
    ~55 MiB a bomb put the collector above its soft limit for good after four."""
    bomb = gzip_bomb(128)
    process, port = start_limited(tmp_path)
    try:
        before = rss_mib(process.pid)
        statuses = [post(port, bomb, PROTOBUF, encoding="gzip")[0] for _ in range(8)]
        after = rss_mib(process.pid)
        legitimate = post_json(port, json_body(0.01), retry_until=time.monotonic() + 5)
    finally:
        stop(process)
    assert set(statuses) <= {413, 503} and 413 in statuses, statuses
    assert after - before < 100, f"RSS {before:.0f} MiB before the bombs, {after:.0f} MiB after"
    assert legitimate[0] == 200, legitimate
