"""max_hold bench: a judge that accepts connections and never answers, at a steady rate.

    python bench/max_hold.py [--seconds 60] [--traces-per-s 100] [--max-hold 1s]

A `spanscore run` process receives OTLP/HTTP on loopback, scores with
`failure_localization` (no judge) then `judge_metrics`, whose judge is a socket that
accepts every connection and never answers, and writes what it exports to a file
exporter. The bench sends agent traces of 5 spans (a root and four children, one
request each trace) at a steady rate and reports: requests refused (HTTP 503, the
collector at `max_buffered_spans`), roots exported and how long after they were sent
(read from the file once a second: a delay is up to 1 s late), and the collector's RSS sampled every second
(start, end, peak). Loopback, one machine; the judge's scores are never computed here,
so nothing in it says anything about judge quality.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ports import free_port, wait_for_port  # noqa: E402
from spanscore.core.otlp_json import decode_request  # noqa: E402

CONFIG = """
receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 200ms, max_hold: {max_hold}}}
  failure_localization: {{when: always}}
  judge_metrics: {{judge: {{model: bench-judge, base_url: 'http://127.0.0.1:{judge}/v1', api_key: k}}}}
exporters:
  file: {{path: '{output}'}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization, judge_metrics], exporters: [file]}}
"""


def silent_judge() -> int:
    """A listening socket whose connections are accepted and never answered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1024)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            connection, _ = server.accept()
            held.append(connection)

    threading.Thread(target=accept, daemon=True).start()
    return server.getsockname()[1]


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def trace_request(number: int) -> tuple[bytes, bytes]:
    trace_id = number.to_bytes(16, "big")
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.append(_kv("service.name", "bench-agent"))
    spans = resource_spans.scope_spans.add().spans
    now = time.time_ns()
    root = spans.add(trace_id=trace_id, span_id=(number * 8 + 1).to_bytes(8, "big"), name="invoke_agent helper")
    root.start_time_unix_nano, root.end_time_unix_nano = now - 1_000_000, now
    root.attributes.extend(
        [
            _kv("gen_ai.operation.name", "invoke_agent"),
            _kv("gen_ai.input.messages", json.dumps([{"role": "user", "content": f"order {number}?"}])),
            _kv("gen_ai.output.messages", json.dumps([{"role": "assistant", "content": f"shipped ({number})"}])),
        ]
    )
    for child in range(4):
        span = spans.add(
            trace_id=trace_id,
            span_id=(number * 8 + 2 + child).to_bytes(8, "big"),
            parent_span_id=root.span_id,
            name=f"step {child}",
        )
        span.start_time_unix_nano, span.end_time_unix_nano = now - 900_000, now - 100_000
    return trace_id, request.SerializeToString()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--traces-per-s", type=float, default=100.0)
    parser.add_argument("--max-hold", default="1s")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="max-hold-"))
    port, output = free_port(), work / "out.jsonl"
    config = work / "config.yaml"
    config.write_text(CONFIG.format(port=port, max_hold=args.max_hold, judge=silent_judge(), output=output))
    collector = subprocess.Popen(
        [sys.executable, "-m", "spanscore", "run", "--config", str(config)], stderr=open(work / "stderr.log", "w")
    )
    try:
        wait_for_port(port)
        sent_at: dict[bytes, float] = {}
        exported_at: dict[bytes, float] = {}
        refused, rss = 0, [rss_kb(collector.pid)]
        read_offset = 0

        def read_exports() -> None:
            nonlocal read_offset
            if not output.exists():
                return
            with output.open(encoding="utf-8") as f:
                f.seek(read_offset)
                for line in f:
                    if not line.endswith("\n"):
                        break
                    read_offset += len(line.encode("utf-8"))
                    for rs in decode_request(line).resource_spans:
                        for ss in rs.scope_spans:
                            for span in ss.spans:
                                if not span.parent_span_id:
                                    exported_at.setdefault(span.trace_id, time.monotonic())

        started = time.monotonic()
        number, next_sample = 0, started + 1.0
        while (now := time.monotonic()) < started + args.seconds:
            due = int((now - started) * args.traces_per_s)
            while number < due:
                number += 1
                trace_id, body = trace_request(number)
                http = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/traces", body, {"Content-Type": "application/x-protobuf"}
                )
                try:
                    urllib.request.urlopen(http, timeout=10).read()
                    sent_at[trace_id] = time.monotonic()
                except urllib.error.HTTPError as error:
                    if error.code != 503:
                        raise
                    refused += 1
            if now >= next_sample:
                rss.append(rss_kb(collector.pid))
                read_exports()
                next_sample += 1.0
            time.sleep(0.002)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            read_exports()
            time.sleep(0.2)
        rss.append(rss_kb(collector.pid))
        delays = sorted(exported_at[t] - sent_at[t] for t in sent_at if t in exported_at)
        print(
            json.dumps(
                {
                    "seconds": args.seconds,
                    "traces_per_s": args.traces_per_s,
                    "spans_per_s": args.traces_per_s * 5,
                    "max_hold": args.max_hold,
                    "sent_traces": len(sent_at),
                    "refused_requests": refused,
                    "exported_roots": len(delays),
                    "export_delay_s_p50": round(statistics.median(delays), 2) if delays else None,
                    "export_delay_s_max": round(delays[-1], 2) if delays else None,
                    "rss_mb_start_end_peak": [round(rss[0] / 1024), round(rss[-1] / 1024), round(max(rss) / 1024)],
                },
                indent=2,
            )
        )
    finally:
        collector.terminate()  # its shutdown gives the held judge calls their skipped results
        try:
            collector.wait(120)
        except subprocess.TimeoutExpired:
            collector.kill()
            collector.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
