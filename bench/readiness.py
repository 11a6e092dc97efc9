"""Readiness bench: how often a 3-service trace is complete when it is first scored.

    python bench/readiness.py [--traces 30] [--every 0.5] [--configs main parents services]

A `spanscore run` process receives OTLP/HTTP on loopback, scores with
`failure_localization` (`when: always`, no judge) and writes what it exports to a file
exporter. The bench sends traces of three services, each over its own OTLP/HTTP
requests, with the span flags OpenTelemetry SDKs set (a parent's remoteness known):

- `agent`: `invoke_agent` root (1.6 s), a `chat` call, an MCP `tools/call` client span
  and a `retrieve` client span; each span is sent when it ends (a simple span
  processor);
- `retriever`: its server span, child of the agent's `retrieve` span (remote parent),
  sent when it ends;
- `tool-server`: its server span, child of the agent's `tools/call` span (remote
  parent), and two internal children (the database query, errored in one trace of
  `--fail-every`, and formatting the result). Its exporter is a batch span processor
  with the default 5 s schedule delay: every 5 s (from a random phase) it sends the
  spans that ended since the last send, so they arrive 0 to 5 s after they end, and a
  send that falls between a child's end and the server span's sends the child alone.

8 spans per trace, a trace started every `--every` seconds. Per config, a fresh
collector; the file exporter's output is read as it is written, and for each trace the
first export holding its spans (the one scored; spans that come after it are forwarded
as a late trace, not scored again) tells whether it was complete (all 8 spans), whether
a failed tool call was seen by that first score (`failure_localization` below 1), and
how long after the agent's root was sent it was exported. Configs:

- `main`: `trace_wait: 1s` and `wait_for_parents: false`: the readiness of releases
  before the waits existed (run against such a release, whose settings lack the key,
  the bench runs this config alone and writes `trace_wait: 1s` only);
- `parents`: the default: `trace_wait: 1s`, a trace waits for the local parents its
  spans name;
- `services`: the default plus `trace_wait_by_service: {agent: 6s}`: the agent's traces
  wait 6 s after their last span, for the tool server it calls, whose spans of a trace
  name no service before they arrive.

Loopback, one machine; the tool server's phase is drawn from `--seed`, so the configs
see the same traffic.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from spanscore.core.score_encoding import result_keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.ports import free_port, wait_for_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPANS_PER_TRACE = 8
SCHEDULE_DELAY_S = 5.0  # BatchSpanProcessor's default
LOCAL, REMOTE = 0x101, 0x301  # sampled; parent's is_remote known (false / true)
CONFIGS = {
    "main": "trace_wait: 1s, wait_for_parents: false",
    "parents": "trace_wait: 1s",
    "services": "trace_wait: 1s, trace_wait_by_service: {agent: 6s}",
}


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


@dataclass(order=True)
class Send:
    at_s: float  # from the run's start
    service: str = field(compare=False)
    spans: list[Span] = field(compare=False)


def make_span(trace_id, span_id, parent_id, name, kind, start_s, end_s, flags, attributes=(), error=False) -> Span:
    base = 1_800_000_000_000_000_000
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_id,
        name=name,
        kind=kind,
        flags=flags,
        start_time_unix_nano=base + int(start_s * 1e9),
        end_time_unix_nano=base + int(end_s * 1e9),
        attributes=[_kv(k, v) for k, v in attributes],
        status=Status(code=Status.STATUS_CODE_ERROR, message="orders db timed out") if error else None,
    )


def traffic(traces: int, every_s: float, fail_every: int, rng: random.Random) -> tuple[list[Send], dict]:
    """The sends of every service in time order, and per trace id what it holds."""
    sends: list[Send] = []
    tool_spans: list[tuple[float, Span]] = []  # (end, span): the batch processor sends them by its schedule
    expected = {}
    ids = lambda n: rng.randbytes(n)  # noqa: E731
    for i in range(traces):
        t0 = 0.5 + i * every_s
        trace_id = ids(16)
        root, chat, call, retrieve, served, tool, query, fmt = (ids(8) for _ in range(8))
        failed = fail_every > 0 and i % fail_every == fail_every - 1
        question = f"Where is order {1000 + i}?"
        query_end = 0.75 + rng.uniform(0.0, 0.2)
        fmt_end = query_end + 0.2 + rng.uniform(0.0, 0.2)
        agent = [
            make_span(trace_id, chat, root, "chat gpt-4o-mini", Span.SPAN_KIND_CLIENT, 0.05, 0.3, LOCAL,
                      [("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "gpt-4o-mini"),
                       ("gen_ai.input.messages", _messages("user", question))]),
            make_span(trace_id, call, root, "tools/call search_orders", Span.SPAN_KIND_CLIENT, 0.35, fmt_end + 0.1,
                      LOCAL, [("mcp.method.name", "tools/call"), ("gen_ai.tool.name", "search_orders"),
                              ("gen_ai.operation.name", "execute_tool")]),
            make_span(trace_id, retrieve, root, "retrieve policies", Span.SPAN_KIND_CLIENT, fmt_end + 0.15,
                      fmt_end + 0.35, LOCAL, [("gen_ai.operation.name", "retrieval")]),
            make_span(trace_id, root, b"", "invoke_agent support", Span.SPAN_KIND_INTERNAL, 0.0, fmt_end + 0.5,
                      LOCAL, [("gen_ai.operation.name", "invoke_agent"), ("gen_ai.agent.name", "support"),
                              ("session.id", f"session-{i}"),
                              ("gen_ai.input.messages", _messages("user", question)),
                              ("gen_ai.output.messages", _messages("assistant", f"Order {1000 + i} ships today."))]),
        ]  # fmt: skip
        retriever = make_span(trace_id, served, retrieve, "retrieve documents", Span.SPAN_KIND_SERVER,
                              fmt_end + 0.17, fmt_end + 0.33, REMOTE, [("db.system.name", "qdrant")])  # fmt: skip
        tools = [
            make_span(trace_id, query, tool, "SELECT orders", Span.SPAN_KIND_CLIENT, 0.4, query_end, LOCAL,
                      [("db.system.name", "postgresql")], error=failed),
            make_span(trace_id, fmt, tool, "format result", Span.SPAN_KIND_INTERNAL, query_end, fmt_end, LOCAL),
            make_span(trace_id, tool, call, "tools/call search_orders", Span.SPAN_KIND_SERVER, 0.37,
                      fmt_end + 0.05, REMOTE, [("mcp.method.name", "tools/call")]),
        ]  # fmt: skip
        for s in agent:
            sends.append(Send(t0 + _end_s(s), "agent", [s]))
        sends.append(Send(t0 + _end_s(retriever), "retriever", [retriever]))
        tool_spans.extend((t0 + _end_s(s), s) for s in tools)
        expected[trace_id] = {"failed": failed, "root_sent_s": t0 + _end_s(agent[-1])}
    phase = rng.uniform(0.0, SCHEDULE_DELAY_S)
    tick = phase
    last_end = max(end for end, _ in tool_spans)
    while tick < last_end + SCHEDULE_DELAY_S:
        batch = [s for end, s in tool_spans if tick - SCHEDULE_DELAY_S < end <= tick]
        if batch:
            sends.append(Send(tick, "tool-server", batch))
        tick += SCHEDULE_DELAY_S
    return sorted(sends), expected


def _messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _end_s(s: Span) -> float:
    return (s.end_time_unix_nano - 1_800_000_000_000_000_000) / 1e9


def request_of(service: str, spans: list[Span]) -> bytes:
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[_kv("service.name", service)]),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name=f"bench.{service}"), spans=spans)],
            )
        ]
    ).SerializeToString()


def knows_parent_waits() -> bool:
    from spanscore.pipeline.settings import PipelineSettings

    return "wait_for_parents" in PipelineSettings.model_fields


class ExportReader(threading.Thread):
    """Reads the file exporter's lines as they are written; per trace id, the first line
    holding its spans, when it was read, and those spans' names and scores."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path = path
        self.first: dict[bytes, dict] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.path.exists() and not self.stop.is_set():
            time.sleep(0.02)
        with open(self.path) as lines:
            partial = ""  # a line the exporter is still writing
            while True:
                partial += lines.readline()
                if not partial.endswith("\n"):
                    if self.stop.is_set():
                        return
                    time.sleep(0.02)
                    continue
                self._read(partial, time.monotonic())
                partial = ""

    def _read(self, line: str, at: float) -> None:
        by_trace: dict[bytes, list[dict]] = {}
        for resource_spans in json.loads(line).get("resourceSpans", []):
            for scope_spans in resource_spans.get("scopeSpans", []):
                for s in scope_spans.get("spans", []):
                    by_trace.setdefault(bytes.fromhex(s["traceId"]), []).append(s)
        for trace_id, spans in by_trace.items():
            if trace_id not in self.first:
                self.first[trace_id] = {"at": at, "spans": spans}


FAILURE_SCORE = result_keys("failure_localization").score


def failure_score(spans: list[dict]) -> float | None:
    for s in spans:
        for attribute in s.get("attributes", []):
            if attribute["key"] == FAILURE_SCORE:
                value = attribute["value"]
                return float(value.get("doubleValue", value.get("intValue", 0)))
    return None


def run_config(workdir: Path, name: str, assembler: str, sends: list[Send], expected: dict) -> dict:
    port = free_port()
    out = workdir / f"{name}.jsonl"
    config = workdir / f"{name}.yaml"
    config.write_text(f"""
receivers:
  otlp:
    protocols:
      http: {{endpoint: '127.0.0.1:{port}'}}
processors:
  assembler: {{{assembler}, trace_timeout: 30s}}
  failure_localization: {{when: always}}
exporters:
  file: {{path: '{out}'}}
service:
  telemetry: {{logs: {{level: warn}}}}
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization], exporters: [file]}}
""")
    collector = subprocess.Popen([sys.executable, "-m", "spanscore", "run", "--config", str(config)], cwd=ROOT)
    reader = ExportReader(out)
    try:
        wait_for_port(port)
        reader.start()
        url = f"http://127.0.0.1:{port}/v1/traces"
        start = time.monotonic()
        for send in sends:
            time.sleep(max(0.0, start + send.at_s - time.monotonic()))
            body = request_of(send.service, send.spans)
            post = urllib.request.Request(url, body, {"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(post, timeout=10) as answer:
                answer.read()
        deadline = time.monotonic() + 40  # the longest wait, with room to spare, under trace_timeout + 10 s
        while len(reader.first) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        collector.terminate()
        collector.wait(60)
        reader.stop.set()
        reader.join(10)
    complete = failed = failed_seen = scored = 0
    delays = []
    for trace_id, facts in expected.items():
        first = reader.first.get(trace_id)
        if first is None:
            continue
        names = [s["name"] for s in first["spans"]]
        complete += len(names) == SPANS_PER_TRACE
        score = failure_score(first["spans"])
        scored += score is not None
        if facts["failed"]:
            failed += 1
            failed_seen += score is not None and score < 1.0
        delays.append(first["at"] - (start + facts["root_sent_s"]))
    delays.sort()
    return {
        "traces": len(expected),
        "exported": sum(trace_id in reader.first for trace_id in expected),
        "scored": scored,
        "complete": complete,
        "failed": failed,
        "failed_seen": failed_seen,
        "delay_median_s": delays[len(delays) // 2] if delays else None,
        "delay_max_s": delays[-1] if delays else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=30)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between traces' starts")
    parser.add_argument("--fail-every", type=int, default=3, help="one trace in N has its tool call fail")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args()
    if not 1 <= args.traces <= 500 or args.every <= 0:
        parser.error("--traces: 1 to 500; --every: positive")
    sends, expected = traffic(args.traces, args.every, args.fail_every, random.Random(args.seed))
    configs = {name: CONFIGS[name] for name in args.configs}
    if not knows_parent_waits():
        print("this release has no readiness waits: running main's readiness alone (trace_wait: 1s)")
        configs = {"main": "trace_wait: 1s"}
    print(
        f"{args.traces} traces of 3 services, {SPANS_PER_TRACE} spans each, one every {args.every}s; the tool "
        f"server's batch processor sends every {SCHEDULE_DELAY_S:g}s; its tool call fails in 1 of {args.fail_every}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, assembler in configs.items():
            r = run_config(Path(tmp), name, assembler, sends, expected)
            print(
                f"{name:9s} ({assembler}): first scored complete {r['complete']}/{r['traces']} "
                f"({100 * r['complete'] / r['traces']:.0f}%); failed tool calls seen by the first score "
                f"{r['failed_seen']}/{r['failed']}; exported {r['exported']}, scored {r['scored']}; "
                f"first export after the agent's root was sent: median {r['delay_median_s']:.1f}s, "
                f"max {r['delay_max_s']:.1f}s"
            )


if __name__ == "__main__":
    main()
