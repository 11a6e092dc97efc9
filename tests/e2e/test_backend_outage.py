"""A backend down for 60 s under load: nothing lost, memory bounded.

A `spanscore run` process with the write-ahead log on receives agent-like traces from a
client at ~1,000 spans/s for 75 s; its backend answers UNAVAILABLE for the first 60 s.
The collector keeps retrying (no retry time limit), holds spans up to
`max_buffered_spans`, then asks the client to retry later; the client retries what was
refused. When the backend is back every acknowledged span reaches it, and the
collector's memory stayed bounded all along (sampled every second).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.otlp_client import EXPORT
from tests.support.ports import free_port
from tests.support.processes import listening, rss_mib
from tests.support.running import wait_until
from tests.support.spans import agent_request

ROOT = Path(__file__).resolve().parents[2]
OUTAGE_S = 60.0
LOAD_S = 75.0
HELD = 5_000

CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 200ms, max_buffered_spans: {held}}}
  embedding_metrics: {{embedder: {{type: static}}}}
exporters:
  otlp:
    endpoint: '127.0.0.1:{sink}'
    tls: {{insecure: true}}
    retry_on_failure: {{initial_interval: 500ms, max_interval: 2s, max_elapsed_time: 0}}
extensions:
  file_storage: {{directory: '{directory}'}}
service:
  extensions: [file_storage]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics], exporters: [otlp]}}
"""


def test_backend_down_for_60_s_loses_nothing_and_memory_stays_bounded(tmp_path, sink):
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(port=port, sink=sink.grpc_port, held=HELD, directory=tmp_path / "storage"))
    sink.down_until = time.monotonic() + OUTAGE_S
    collector = subprocess.Popen(
        [sys.executable, "-m", "spanscore", "run", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged: set[bytes] = set()
    refused = [0]
    rss: list[float] = []
    try:
        assert wait_until(lambda: listening(port), timeout_s=60)
        baseline = rss_mib(collector.pid)

        def send_for(seconds: float) -> None:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                export = channel.unary_unary(
                    EXPORT, request_serializer=ExportTraceServiceRequest.SerializeToString, response_deserializer=None
                )
                deadline = time.monotonic() + seconds
                request = None
                while time.monotonic() < deadline:
                    request = request or agent_request()  # a refused request is sent again
                    try:
                        export(request, timeout=10)
                    except grpc.RpcError as exc:
                        assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                        refused[0] += 1
                        time.sleep(0.5)
                        continue
                    acknowledged.update(
                        s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans
                    )
                    request = None
                    time.sleep(0.016)  # 16 spans per request: ~1,000 spans/s

        client = threading.Thread(target=send_for, args=(LOAD_S,), daemon=True)
        client.start()
        while client.is_alive():
            rss.append(rss_mib(collector.pid))
            client.join(1.0)
        assert wait_until(lambda: acknowledged <= {s.span_id for s in sink.spans()}, timeout_s=60)
    finally:
        collector.send_signal(signal.SIGTERM)
        _, stderr = collector.communicate(timeout=60)
    delivered = {s.span_id for s in sink.spans()}
    assert not acknowledged - delivered, f"{len(acknowledged - delivered)} acknowledged spans lost"
    assert refused[0] > 0  # the bound was reached: the client was asked to retry
    assert sink.attempts > len(sink.requests)  # the exporter retried through the outage
    # Bounded: the held spans are capped, so memory does not grow with the outage's length.
    assert max(rss) - baseline < 150, f"RSS grew from {baseline:.0f} to {max(rss):.0f} MiB"
    assert collector.returncode == 0, stderr
    print(
        f"{len(acknowledged)} spans acknowledged, all delivered; {refused[0]} refusals; RSS {baseline:.0f} -> "
        f"max {max(rss):.0f} MiB; exporter attempts {sink.attempts}"
    )
