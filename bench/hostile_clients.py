"""Hostile clients against a `spanscore run` process on loopback: what it holds, and how long.

    python bench/hostile_clients.py [--phases memory bombs slowloris idle grpc cardinality]
                                    [--http "read_header_timeout: 5s"] [--grpc "read_timeout: 5s"]
                                    [--hold 15] [--max-label-values N]

Each phase starts a fresh collector (OTLP/HTTP and gRPC receivers, file exporter);
`--http` and `--grpc` are written into the receiver's protocol settings as given.
1. memory: with `memory_limiter: {limit_mib: 400}`, 8 clients POST a ~60 MB OTLP/JSON
   body each at once, then 8 clients a ~12 MB one, retrying after 503s for up to a
   minute; the statuses they got in the end, their attempts, and the
   collector's peak resident memory during each load (VmHWM from /proc, reset before it);
2. bombs: ten gzip bombs (~1 MB each, 1 GiB inflated) POSTed one after the other, each
   to be refused with 413 at the body limit, without a memory limiter and then with
   `memory_limiter: {limit_mib: 500}`; what they were answered, the collector's resident
   memory before and 2 s after them, and what a legitimate request then gets;
3. slowloris: 200 connections send an HTTP request's headers one byte a second; how
   many the collector still holds after `--hold` seconds;
4. idle: 2,000 connections that send nothing; how many are still held after `--hold`;
5. grpc: 1,000 Export streams that never send their message (100 per connection); how
   many are still open after `--hold` seconds;
6. cardinality: 20,000 agent traces, each from a service of its own name, scored by the
   no-LLM metrics; the size of the Prometheus scrape once they are all scored
   (`--max-label-values` sets the metrics pipeline's cap).
Figures are for one run on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_spans import AgentRequests  # noqa: E402
from bench.ports import free_port, wait_for_port  # noqa: E402
from spanscore.core.otlp_json import encode_request  # noqa: E402
from tests.support.otlp_client import gzip_bomb  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


class Collector:
    def __init__(
        self,
        workdir: Path,
        http: str,
        grpc_settings: str,
        processors: str = "",
        limiter: str = "",
        metrics: str = "",
    ):
        self.http_port, self.grpc_port, self.prometheus_port = free_port(), free_port(), free_port()
        config = workdir / f"config-{self.http_port}.yaml"
        http_extra = f", {http}" if http else ""
        grpc_extra = f", {grpc_settings}" if grpc_settings else ""
        config.write_text(f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{self.grpc_port}'{grpc_extra}}}
      http: {{endpoint: '127.0.0.1:{self.http_port}'{http_extra}}}
processors:
  {limiter or "assembler: {}"}
exporters:
  file: {{path: '{workdir / "out.jsonl"}', append: false}}
  prometheus: {{endpoint: '127.0.0.1:{self.prometheus_port}'}}
service:
  telemetry: {{logs: {{level: error}}}}
  pipelines:
    traces: {{receivers: [otlp], processors: [{processors or "assembler"}], exporters: [file]}}
    {metrics}
""")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "run", "--config", str(config)], cwd=ROOT, stdout=subprocess.DEVNULL
        )
        wait_for_port(self.http_port)
        wait_for_port(self.grpc_port)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def json_body(megabytes: float) -> bytes:
    template = ExportTraceServiceRequest.FromString(AgentRequests(spans_per_request=512).template.tobytes())
    one = len(encode_request(template))
    request = ExportTraceServiceRequest()
    for _ in range(max(1, round(megabytes * 1e6 / one))):
        request.resource_spans.extend(template.resource_spans)
    return encode_request(request).encode()


def post_all(port: int, body: bytes, clients: int, retry_s: float = 0.0) -> tuple[list[int | str], int]:
    """Each client POSTs `body`, again after Retry-After on 503 for up to `retry_s`:
    (final statuses, attempts in all)."""
    statuses: list[int | str] = [0] * clients
    attempts = [0] * clients
    retry_until = time.monotonic() + retry_s

    def post(i: int) -> None:
        while True:
            attempts[i] += 1
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=300) as response:
                    statuses[i] = response.status
            except urllib.error.HTTPError as error:
                statuses[i] = error.code
                if error.code == 503 and time.monotonic() < retry_until:
                    time.sleep(float(error.headers.get("Retry-After", "1")))
                    continue
            except OSError as error:
                statuses[i] = type(error).__name__
            return

    threads = [threading.Thread(target=post, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses, sum(attempts)


def memory(workdir: Path, args) -> None:
    collector = Collector(
        workdir,
        args.http,
        args.grpc,
        processors="memory_limiter, assembler",
        limiter="memory_limiter: {limit_mib: 400}\n  assembler: {}",
    )
    try:
        start = vm_kib(collector.process.pid, "VmRSS") / 1024
        for megabytes, retry_s in ((60, 0.0), (12, 60.0)):
            body = json_body(megabytes)
            Path(f"/proc/{collector.process.pid}/clear_refs").write_text("5")  # peak from here on
            began = time.monotonic()
            statuses, attempts = post_all(collector.http_port, body, 8, retry_s)
            elapsed = time.monotonic() - began
            time.sleep(2)  # what the accepted requests cost after they are answered
            peak = vm_kib(collector.process.pid, "VmHWM") / 1024
            counts = {s: statuses.count(s) for s in sorted(set(statuses), key=str)}
            print(
                f"memory: 8 x {len(body) / 1e6:.1f} MB JSON, limit_mib 400: final statuses {counts} after "
                f"{attempts} attempts (503s retried for up to {retry_s:.0f} s) in {elapsed:.1f} s; "
                f"RSS at start {start:.0f} MiB, peak {peak:.0f} MiB",
                flush=True,
            )
    finally:
        collector.stop()


def bombs(workdir: Path, args) -> None:
    bomb = gzip_bomb(1024)
    legitimate = encode_request(
        ExportTraceServiceRequest.FromString(AgentRequests(spans_per_request=16).template.tobytes())
    ).encode()
    for limiter in ("", "memory_limiter: {limit_mib: 500}"):
        collector = Collector(
            workdir,
            args.http,
            args.grpc,
            processors="memory_limiter, assembler" if limiter else "",
            limiter=f"{limiter}\n  assembler: {{}}" if limiter else "",
        )
        try:
            pid = collector.process.pid
            before = vm_kib(pid, "VmRSS") / 1024
            statuses: list[int | str] = []
            for _ in range(10):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{collector.http_port}/v1/traces",
                    data=bomb,
                    headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
                )
                try:
                    with urllib.request.urlopen(request, timeout=60) as response:
                        statuses.append(response.status)
                except urllib.error.HTTPError as error:
                    statuses.append(error.code)
            time.sleep(2)
            after = vm_kib(pid, "VmRSS") / 1024
            answers, _ = post_all(collector.http_port, legitimate, 1)
            print(
                f"bombs: 10 x {len(bomb) / 1e6:.1f} MB gzip (1 GiB inflated), {limiter or 'no memory_limiter'}: "
                f"answered {statuses}; RSS before {before:.0f} MiB, after {after:.0f} MiB; "
                f"a legitimate request then: {answers[0]}",
                flush=True,
            )
        finally:
            collector.stop()


def held(sockets: list[socket.socket]) -> int:
    """How many of `sockets` the server has not closed (what it sent before closing is read and dropped)."""
    count = 0
    for s in sockets:
        try:
            while s.recv(65536, socket.MSG_DONTWAIT):
                pass
        except BlockingIOError:
            count += 1  # open, nothing more to read
        except OSError:
            pass  # reset
    return count


def slowloris(workdir: Path, args) -> None:
    collector = Collector(workdir, args.http, args.grpc)
    sockets = []
    try:
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", collector.http_port))
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            sockets.append(s)
        header = b"X-Slow: " + b"a" * 10_000
        began = time.monotonic()
        for i in range(int(args.hold)):
            for s in sockets:
                try:
                    s.send(header[i : i + 1])
                except OSError:
                    pass
            time.sleep(max(0.0, began + i + 1 - time.monotonic()))
        print(
            f"slowloris: 200 connections sending headers a byte a second, {held(sockets)} still held "
            f"after {time.monotonic() - began:.0f} s",
            flush=True,
        )
    finally:
        for s in sockets:
            s.close()
        collector.stop()


def idle(workdir: Path, args) -> None:
    collector = Collector(workdir, args.http, args.grpc)
    sockets = []
    try:
        for _ in range(2000):
            sockets.append(socket.create_connection(("127.0.0.1", collector.http_port)))
        began = time.monotonic()
        time.sleep(args.hold)
        print(
            f"idle: 2000 connections sending nothing, {held(sockets)} still held "
            f"after {time.monotonic() - began:.0f} s",
            flush=True,
        )
    finally:
        for s in sockets:
            s.close()
        collector.stop()


def silent_grpc(workdir: Path, args) -> None:
    collector = Collector(workdir, args.http, args.grpc)

    async def run() -> tuple[int, dict[str, int]]:
        never = asyncio.Event()

        async def nothing():
            await never.wait()
            yield b""

        channels = [
            grpc.aio.insecure_channel(
                f"127.0.0.1:{collector.grpc_port}", options=[("grpc.use_local_subchannel_pool", 1)]
            )
            for _ in range(10)
        ]
        calls = [
            channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)(nothing())
            for channel in channels
            for _ in range(100)
        ]
        await asyncio.sleep(args.hold)
        open_calls = sum(not call.done() for call in calls)
        codes: dict[str, int] = {}
        for call in calls:
            if call.done():
                name = (await call.code()).name
                codes[name] = codes.get(name, 0) + 1
        for call in calls:
            call.cancel()
        for channel in channels:
            await channel.close()
        return open_calls, codes

    try:
        began = time.monotonic()
        open_calls, codes = asyncio.run(run())
        print(
            f"grpc: 1000 Export streams that send nothing, {open_calls} still open after "
            f"{time.monotonic() - began:.0f} s; ended: {codes}",
            flush=True,
        )
    finally:
        collector.stop()


def agent_traces(services: int, first: int) -> ExportTraceServiceRequest:
    """One agent trace (root and a chat span) per service, each service named apart."""
    request = ExportTraceServiceRequest()
    for i in range(first, first + services):
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.add(key="service.name").value.string_value = f"agent-{i:05d}"
        spans = resource_spans.scope_spans.add().spans
        trace_id, root_id = os.urandom(16), os.urandom(8)
        root = spans.add(trace_id=trace_id, span_id=root_id, name="invoke_agent support")
        for key, value in (
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.agent.name", "support"),
            ("gen_ai.input.messages", '[{"role":"user","parts":[{"type":"text","content":"Where is my order?"}]}]'),
            ("gen_ai.output.messages", '[{"role":"assistant","parts":[{"type":"text","content":"It ships today."}]}]'),
        ):
            root.attributes.add(key=key).value.string_value = value
        chat = spans.add(trace_id=trace_id, span_id=os.urandom(8), parent_span_id=root_id, name="chat gpt-4o-mini")
        chat.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    return request


def cardinality(workdir: Path, args) -> None:
    limit = f", max_label_values: {args.max_label_values}" if args.max_label_values else ""
    collector = Collector(
        workdir,
        args.http,
        args.grpc,
        processors="assembler, embedding_metrics",
        limiter="assembler: {trace_wait: 100ms}\n  embedding_metrics: {embedder: {type: static}}",
        metrics=f"metrics: {{exporters: [prometheus]{limit}}}",
    )
    services = 20_000
    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            for first in range(0, services, 500):
                export(agent_traces(500, first).SerializeToString(), timeout=60)

        def scrape() -> bytes:
            url = f"http://127.0.0.1:{collector.prometheus_port}/metrics"
            with urllib.request.urlopen(url, timeout=60) as response:
                return response.read()

        deadline = time.monotonic() + 120
        text, previous = scrape(), None
        while text != previous and time.monotonic() < deadline:  # until every trace is scored
            time.sleep(3)
            previous, text = text, scrape()
        series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
        names = len(
            {line.split(b'service_name="')[1].split(b'"')[0] for line in text.splitlines() if b"service_name=" in line}
        )
        print(
            f"cardinality: {services} agents named apart, max_label_values {args.max_label_values or 'default'}: "
            f"/metrics {len(text) / 1e6:.2f} MB, {series} samples, {names} service_name values",
            flush=True,
        )
    finally:
        collector.stop()


PHASES = {
    "memory": memory,
    "bombs": bombs,
    "slowloris": slowloris,
    "idle": idle,
    "grpc": silent_grpc,
    "cardinality": cardinality,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", nargs="+", choices=list(PHASES), default=list(PHASES))
    parser.add_argument("--http", default="", help="extra OTLP/HTTP receiver settings, as YAML flow items")
    parser.add_argument("--grpc", default="", help="extra OTLP/gRPC receiver settings, as YAML flow items")
    parser.add_argument("--hold", type=float, default=15.0, help="seconds the hostile clients keep at it")
    parser.add_argument("--max-label-values", type=int, default=0, help="the metrics pipeline's cap (default: its own)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryDirectory() as workdir:
        for phase in args.phases:
            PHASES[phase](Path(workdir), args)


if __name__ == "__main__":
    main()
