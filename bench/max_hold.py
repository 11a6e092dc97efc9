"""max_hold bench: a judge that accepts connections and never answers, at a steady rate.

    python bench/max_hold.py [--seconds 300] [--traces-per-s 200] [--max-hold 30s]
                             [--max-following-traces N] [--late-spans rescore] [--follow-s 180]

A `spanscore run` process receives OTLP/HTTP on loopback, scores with
`failure_localization` (no judge) then `judge_metrics`, whose judge is a loopback
OpenAI server that accepts every request and holds it unanswered, and exports OTLP/HTTP
(protobuf) to a sink in the bench's process. The bench sends agent traces of 5 spans (a root and four
children, one request each trace) at a steady rate and reports: requests refused (HTTP
503, the collector at `max_buffered_spans`) or left unanswered for 10 s, roots exported and how long after they
were sent (p50/p99/max), the
collector's RSS sampled every second (start, peak, end, and the slope over the last 4
minutes), and the traces whose roots left with `eval.<metric>.pending` and whose
results had not followed when sending stopped. Then the judge starts answering (held
requests included) and the bench counts, for up to `--follow-s`, the carriers that
follow those traces: with the judge's results, given up (`max_following_traces`) or in
error. Loopback, one machine; the judge answers from the schema (every score 0.8), so
nothing here says anything about judge quality, only about the plumbing.

Measured (300 s at 200 traces/s, defaults: max_hold 30s, max_following_traces 5000; one
run on a shared 2-core machine): 0 refused, 0 unanswered; 59,999 of 59,999 roots
exported, 30.21 / 33.6 / 35.57 s after sending (p50 / p99 / max); RSS every 30 s: 99,
158, 493, 604, 615, 641, 648, 659, 662, 664 MB (it rises while the bounded stores fill,
then levels off); 48,975 traces' results given up while sending, 4,992 pending when it
stopped, all of them then given up (the 6,032 traces still within max_hold left after the
judge began answering and took the bound past 5,000 again), none pending after 102 s.
With `--seconds 600`: 119,999 of 119,999 exported, max 38.57 s; RSS 99 MB at the start,
703 MB at its peak, 679 MB when sending stopped, 4.6 MB/min over the last 4 minutes.
Before the collector's full garbage collection every 30 s (pipeline/gc_tuning.py) the
same 300 s run grew to 1,019 MB, 144 MB/min over its last 4 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ports import free_port, wait_for_port  # noqa: E402
from spanscore.core.attributes import attributes_to_dict  # noqa: E402
from tests.support.judge_answers import schema_judge  # noqa: E402
from tests.support.openai_server import OpenAIServer, RecordedRequest  # noqa: E402

CONFIG = """
receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 200ms, max_hold: {max_hold}, late_spans: {late_spans}{following}}}
  failure_localization: {{when: always}}
  judge_metrics: {{judge: {{model: bench-judge, base_url: 'http://127.0.0.1:{judge}/v1', api_key: k}}}}
exporters:
  otlphttp: {{endpoint: 'http://127.0.0.1:{sink}'}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization, judge_metrics], exporters: [otlphttp]}}
"""


class SwitchableJudge(OpenAIServer):
    """A loopback judge that holds every chat request unanswered until `answer()`, then
    answers them all, and every later one, from the request's schema. It keeps no
    record of the requests (a soak sends many)."""

    def __init__(self) -> None:
        super().__init__(handler=schema_judge(score=0.8))
        self._answering: asyncio.Event | None = None  # made in the server's loop
        self.held = 0

    async def _record(self, request) -> RecordedRequest:
        recorded = await super()._record(request)
        with self._lock:
            self.requests.clear()
        return recorded

    async def _chat_served(self, request, recorded):
        if self._answering is None:
            self._answering = asyncio.Event()
        self.held += 1
        try:
            await self._answering.wait()
        finally:
            self.held -= 1
        return await super()._chat_served(request, recorded)

    def answer(self) -> None:
        def start_answering() -> None:
            if self._answering is None:
                self._answering = asyncio.Event()
            self._answering.set()

        assert self._loop is not None
        self._loop.call_soon_threadsafe(start_answering)


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


class Exports(ThreadingHTTPServer):
    """A loopback OTLP/HTTP sink for what the collector exports: when each root arrived,
    which roots left with pending results, and how each carrier that followed them ended."""

    GIVEN_UP = "given up:"

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.lock = threading.Lock()
        self.root_at: dict[bytes, float] = {}
        self.pending: set[bytes] = set()  # roots that left with `eval.<metric>.pending`
        self.followed: dict[bytes, str] = {}  # by trace: "scored", "given up", "error" or "other"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def received(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self._saw(span)

    def _saw(self, span) -> None:
        if not span.parent_span_id:
            self.root_at.setdefault(span.trace_id, time.monotonic())
            if any(kv.key.endswith(".pending") for kv in span.attributes):
                self.pending.add(span.trace_id)
        elif span.name == "evaluate_trace":
            attributes = attributes_to_dict(span.attributes)
            if any(str(v).startswith(self.GIVEN_UP) for k, v in attributes.items() if k.endswith(".skipped")):
                how = "given up"
            elif any(k.endswith(".error") for k in attributes):
                how = "error"
            elif any(k.endswith(".score") for k in attributes):
                how = "scored"
            else:
                how = "other"
            self.followed[span.trace_id] = how

    def still_pending(self) -> set[bytes]:
        with self.lock:
            return self.pending - self.followed.keys()

    def exported(self, traces: dict[bytes, float]) -> int:
        with self.lock:
            return len(self.root_at.keys() & traces.keys())

    def outcomes(self, traces: set[bytes]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for trace_id in traces:
            how = self.followed.get(trace_id, "still pending")
            counts[how] = counts.get(how, 0) + 1
        return counts


class _SinkHandler(BaseHTTPRequestHandler):
    server: Exports
    protocol_version = "HTTP/1.1"  # the exporter keeps its connections

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received(gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body)
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, RSS kB) samples, in MB a minute."""
    if len(samples) < 2:
        return None
    xs, ys = [t for t, _ in samples], [kb / 1024 for _, kb in samples]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return 60 * sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else None


def percentile(values: list[float], share: float) -> float | None:
    return round(values[min(len(values) - 1, int(share * len(values)))], 2) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--traces-per-s", type=float, default=200.0)
    parser.add_argument("--max-hold", default="30s")
    parser.add_argument("--max-following-traces", type=int, default=None, help="the collector's default if not given")
    parser.add_argument("--late-spans", default="rescore", choices=["rescore", "forward"])
    parser.add_argument("--follow-s", type=float, default=180.0, help="how long results may follow once it answers")
    args = parser.parse_args()
    # The held requests of calls the collector gave up end as lost connections: not news.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    work = Path(tempfile.mkdtemp(prefix="max-hold-"))
    port, exports = free_port(), Exports()
    config = work / "config.yaml"
    judge = SwitchableJudge()
    judge.start()
    following = "" if args.max_following_traces is None else f", max_following_traces: {args.max_following_traces}"
    config.write_text(
        CONFIG.format(
            port=port,
            max_hold=args.max_hold,
            late_spans=args.late_spans,
            following=following,
            judge=judge.port,
            sink=exports.server_port,
        )
    )
    collector = subprocess.Popen(
        [sys.executable, "-m", "spanscore", "run", "--config", str(config)], stderr=open(work / "stderr.log", "w")
    )
    try:
        wait_for_port(port)
        sent_at: dict[bytes, float] = {}
        refused = unanswered = 0
        started = time.monotonic()
        rss: list[tuple[float, int]] = [(0.0, rss_kb(collector.pid))]
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
                except (TimeoutError, urllib.error.URLError):  # no answer within 10 s: the client gave up
                    unanswered += 1
            if now >= next_sample:
                rss.append((now - started, rss_kb(collector.pid)))
                next_sample += 1.0
            time.sleep(0.002)
        sending_stopped = time.monotonic()
        pending_then = exports.still_pending()
        given_up_while_sending = sum(1 for how in exports.followed.values() if how == "given up")
        unexported_then = len(sent_at) - exports.exported(sent_at)
        judge.answer()
        follow_deadline = sending_stopped + args.follow_s
        while time.monotonic() < follow_deadline:
            time.sleep(1.0)
            if not exports.still_pending() and exports.exported(sent_at) == len(sent_at):
                break
        followed_within_s = round(time.monotonic() - sending_stopped, 1)
        rss_end = rss_kb(collector.pid)
        with exports.lock:
            delays = sorted(exports.root_at[t] - sent_at[t] for t in sent_at if t in exports.root_at)
            outcomes = exports.outcomes(pending_then)
        last_4_min = [(t, kb) for t, kb in rss if t >= args.seconds - 240]
        slope = slope_mb_per_min(last_4_min)
        print(
            json.dumps(
                {
                    "seconds": args.seconds,
                    "traces_per_s": args.traces_per_s,
                    "spans_per_s": args.traces_per_s * 5,
                    "max_hold": args.max_hold,
                    "max_following_traces": args.max_following_traces or "default",
                    "late_spans": args.late_spans,
                    "sent_traces": len(sent_at),
                    "refused_requests": refused,
                    "requests_unanswered_in_10s": unanswered,
                    "exported_roots": len(delays),
                    "roots_not_exported_when_sending_stopped": unexported_then,
                    "export_delay_s_p50_p99_max": [percentile(delays, 0.5), percentile(delays, 0.99)]
                    + [round(delays[-1], 2) if delays else None],
                    "rss_mb_start_peak_end_of_sending": [
                        round(rss[0][1] / 1024),
                        round(max(kb for _, kb in rss) / 1024),
                        round(rss[-1][1] / 1024),
                    ],
                    "rss_slope_mb_per_min_last_4_min": None if slope is None else round(slope, 1),
                    "rss_mb_every_30_s": [round(kb / 1024) for t, kb in rss if round(t) % 30 == 0],
                    "given_up_while_sending": given_up_while_sending,
                    "traces_pending_when_sending_stopped": len(pending_then),
                    "their_results_once_the_judge_answered": outcomes,
                    "follow_phase_s": followed_within_s,
                    "still_pending_at_the_end": len(exports.still_pending()),
                    "rss_mb_at_the_end": round(rss_end / 1024),
                },
                indent=2,
            )
        )
    finally:
        collector.terminate()
        try:
            collector.wait(120)
        except subprocess.TimeoutExpired:
            collector.kill()
            collector.wait()
        judge.stop()
        exports.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
