"""`sending_queue.storage`: a backend that is down fills the disk, not memory.

A `spanscore run` process with `max_buffered_spans: 2000` and its otlp exporter's queue
in `file_storage` takes 10,000 spans while its backend answers UNAVAILABLE: none is
refused (each trace leaves memory once stored), and the collector's memory does not
grow with them. It is stopped with the backend still down, the stored spans stay on
disk, and after a restart with the backend back every acknowledged span arrives, each
trace's spans together in one request.
"""

from __future__ import annotations

import signal
import subprocess
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.extensions.persistent_queue import PersistentQueue
from spanscore.extensions.write_ahead_log import WriteAheadLog
from tests.support.otlp_client import EXPORT
from tests.support.ports import free_port
from tests.support.processes import launch, rss_mib
from tests.support.running import wait_until
from tests.support.spans import agent_request

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 100ms, max_buffered_spans: 2000}}
exporters:
  otlp:
    endpoint: '127.0.0.1:{sink}'
    tls: {{insecure: true}}
    retry_on_failure: {{initial_interval: 200ms, max_interval: 1s, max_elapsed_time: 2s}}
    sending_queue: {{storage: file_storage}}
extensions:
  file_storage: {{directory: '{directory}'}}
service:
  shutdown_timeout: 3s
  extensions: [file_storage]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler], exporters: [otlp]}}
"""


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    return stderr


def test_a_down_backend_fills_the_disk_queue_not_memory_and_gets_everything_later(tmp_path, sink):
    port = free_port()
    config = tmp_path / "config.yaml"
    storage = tmp_path / "storage"
    config.write_text(CONFIG.format(port=port, sink=sink.grpc_port, directory=storage))
    sink.down_until = time.monotonic() + 3600  # down until the test says otherwise
    collector = launch(config, port)
    baseline = rss_mib(collector.pid)
    sent: list[ExportTraceServiceRequest] = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            export = channel.unary_unary(
                EXPORT, request_serializer=ExportTraceServiceRequest.SerializeToString, response_deserializer=None
            )
            for _ in range(625):  # 16 spans each: 10,000 spans, five times max_buffered_spans
                request = agent_request()
                export(request, timeout=10)  # a refusal (UNAVAILABLE) fails the test
                sent.append(request)
        time.sleep(1.0)
        peak = rss_mib(collector.pid)
    finally:
        stop(collector)  # the backend is still down
    assert sink.requests == [] and sink.attempts > 0
    stored_bytes = sum(p.stat().st_size for p in (storage / "sending_queue" / "otlp").glob("*.wal"))
    assert stored_bytes > 10_000 * 100  # the spans are on disk
    assert peak - baseline < 60, f"RSS grew from {baseline:.0f} to {peak:.0f} MiB"

    sink.down_until = 0.0  # the backend is back
    collector = launch(config, port)
    acknowledged = Counter(
        (s.trace_id, s.span_id) for r in sent for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans
    )
    assert wait_until(lambda: len(sink.spans()) >= len(acknowledged), timeout_s=60)
    stderr = stop(collector)
    delivered = Counter((s.trace_id, s.span_id) for s in sink.spans())
    assert set(delivered) == set(acknowledged) and max(delivered.values()) == 1
    # Each trace's spans arrived together, in one request.
    requests_of_trace: dict[bytes, set[int]] = {}
    for index, request in enumerate(sink.requests):
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    requests_of_trace.setdefault(s.trace_id, set()).add(index)
    assert all(len(indexes) == 1 for indexes in requests_of_trace.values())
    assert "sending them first" in stderr
    # Sent and acknowledged: the disk queue is empty again but for the segment being written.
    assert len(list((storage / "sending_queue" / "otlp").glob("*.wal"))) == 1
    print(
        f"{len(acknowledged)} spans stored while the backend was down ({stored_bytes / 2**20:.1f} MiB on disk, "
        f"RSS {baseline:.0f} -> {peak:.0f} MiB), all delivered after the restart"
    )


def test_the_queue_hands_items_out_oldest_first_and_keeps_what_is_not_acknowledged(tmp_path):
    queue = PersistentQueue(WriteAheadLog(tmp_path))
    assert queue.open() == 0
    numbers = [queue.put(f"request {i}".encode(), spans=i + 1) for i in range(4)]
    first = queue.take(max_spans=3)  # 1 + 2 spans
    assert [(n, data) for n, data, _ in first] == [(numbers[0], b"request 0"), (numbers[1], b"request 1")]
    queue.give_back(first)  # not sent: first in line again
    again = queue.take(max_spans=1)
    assert [n for n, _, _ in again] == [numbers[0]]
    queue.ack(numbers[0], 1)
    assert queue.queued_spans == 2 + 3 + 4
    queue.close()
    reopened = PersistentQueue(WriteAheadLog(tmp_path))
    assert reopened.open() == 9
    assert [data for _, data, _ in reopened.take(max_spans=100)] == [b"request 1", b"request 2", b"request 3"]


def test_a_backlog_opens_without_its_bytes_in_memory(tmp_path):
    item = bytes(range(256)) * 4096  # 1 MiB
    queue = PersistentQueue(WriteAheadLog(tmp_path, segment_bytes=4 << 20))
    queue.open()
    numbers = [queue.put(item[i:] + item[:i], spans=10) for i in range(48)]  # 48 MiB in 12+ segments
    queue.ack(numbers[0], 10)
    queue.close()

    reopened = PersistentQueue(WriteAheadLog(tmp_path, segment_bytes=4 << 20))
    tracemalloc.start()
    try:
        assert reopened.open() == 470
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One segment file at a time (4 MiB and the record being checked), never the 47 MiB backlog.
    assert peak < 12 << 20, f"opening took {peak / 2**20:.1f} MiB"
    taken = reopened.take(max_spans=20)
    assert [data for _, data, _ in taken] == [item[i:] + item[:i] for i in (1, 2)]  # read back from disk
    reopened.close()
