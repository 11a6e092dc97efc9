"""Ingest benchmark: agent-like spans over loopback gRPC through spanscore into a sink.

    python bench/ingest.py [--seconds 20] [--rate 50000] [--compression none|gzip]
                           [--workers 0 1 2] [--only-throughput] [--json FILE]

Phases, each against a fresh `spanscore run` process (default assembler settings:
trace_wait 1s) exporting over OTLP/gRPC to a loopback sink process:
1. throughput: the client sends 512-span requests as fast as they are accepted (4 in
   flight; a refused request is sent again after the delay the collector asks for, as
   OpenTelemetry SDK exporters do); sustained spans/s is what reached the sink per
   second after warm-up; run for the collector core alone, then for the default
   config's processors (static embedder, no judge) and its score metrics with each
   `--workers` count of scoring worker processes (`scoring_workers`; 0 scores in the
   collector process). For each,
   the CPU each process (collector, each worker) spent per span that reached the sink,
   read from its own CPU clock over the steady-state window; with workers, the
   throughput that implies on 4, 8 and 16 cores (a core for the collector process and
   one for each other worker; the collector's ceiling or the workers' sum, whichever
   binds), and the core's CPU per span when offered the rate the most workers sustained
   (the core costs more per span at lower rates: smaller sends, more wake-ups); from it,
   what workers add to the collector per span, and the projection again with the
   collector's core work at its saturated cost plus that addition (at a core each the
   collector runs near its ceiling, where its own batching amortizes as the core's). The
   metrics phases report their verdicts from the collector's own score metrics. The
   metrics phases run with `max_buffered_spans: 60000`: enough to hold
   trace_wait's worth of spans and a queue, so the collector never idles waiting for
   traces to become ready, small enough that little is accepted that is not scored by
   the end;
2. latency: the client offers `--rate` spans/s; per trace, the time from sending its
   request to its root span reaching the sink, minus trace_wait (p50, p99);
3. memory: 100,000 spans sent with a long trace_wait, so all stay buffered; the
   collector's RSS with them held, the core alone and with the metrics loaded (each
   session's traces then wait with their state; everything is scored at shutdown).
Client, collector and sink share this machine's cores; figures are for one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
from google.rpc.error_details_pb2 import RetryInfo
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_spans import AgentRequests  # noqa: E402
from bench.ports import free_port, wait_for_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRACE_WAIT_S = 1.0
# The default config's processors (otel-config.yaml), its judge unset as there without
# OPENAI_API_KEY; the embedder pinned to static, as `auto` picks it without the minilm extra.
DEFAULT_PROCESSORS = ("assembler", "embedding_metrics", "judge_metrics", "failure_localization", "session_metrics")
PROJECTED_CORES = (4, 8, 16)
FAILING_EVERY = 16  # one trace in 16 has failed tool calls
WARM_UP_S = 3.0  # left out of the sustained and CPU figures


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def child_pids(pid: int) -> list[int]:
    """The collector's scoring worker processes (not multiprocessing's resource tracker)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    children = [int(p) for p in path.read_text().split()] if path.exists() else []
    return [c for c in children if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stack:
    """A sink process and a collector process wired to it."""

    def __init__(
        self,
        workdir: Path,
        compression: str,
        trace_wait: str = "1s",
        extra: str = "",
        metrics: bool = False,
        workers: int = 0,
        backlog: int = 0,
        storage: str = "",
    ):
        self.sink_port, self.grpc_port = free_port(), free_port()
        self.sink_output = workdir / f"sink-{self.sink_port}.npz"
        self.sink = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "sink.py"), str(self.sink_port), str(self.sink_output)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.sink.stdout.readline().strip() == "ready"
        config = workdir / f"config-{self.grpc_port}.yaml"
        processors = f"[{', '.join(DEFAULT_PROCESSORS)}]" if metrics else "[assembler]"
        score_exporter = score_pipeline = ""  # the default config's score metrics, with the metrics
        if metrics:
            extra += ", session_idle: 2s"  # sessions close, and are scored, during the run
            self.prometheus_port = free_port()
            score_exporter = f"  prometheus: {{endpoint: '127.0.0.1:{self.prometheus_port}'}}"
            score_pipeline = "    metrics: {exporters: [prometheus]}"
        if workers:
            extra += f", scoring_workers: {workers}"
        if backlog:
            extra += f", max_buffered_spans: {backlog}"
        config.write_text(f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{self.grpc_port}'}}
processors:
  assembler: {{trace_wait: {trace_wait}{extra}}}
  embedding_metrics: {{embedder: {{type: static}}}}
  judge_metrics: {{}}
  failure_localization: {{}}
  session_metrics: {{}}
exporters:
  otlp: {{endpoint: '127.0.0.1:{self.sink_port}', tls: {{insecure: true}}, compression: {compression}}}
{score_exporter}
{storage}
service:
  extensions: [{"file_storage" if storage else ""}]
  telemetry: {{logs: {{level: warn}}}}
  pipelines:
    traces: {{receivers: [otlp], processors: {processors}, exporters: [otlp]}}
{score_pipeline}
""")
        self.collector = subprocess.Popen([sys.executable, "-m", "spanscore", "run", "--config", str(config)], cwd=ROOT)
        wait_for_port(self.grpc_port)

    def stop(self) -> dict[str, np.ndarray]:
        memory = memory_kib(self.collector.pid)
        workers = [memory_kib(pid) for pid in child_pids(self.collector.pid)]
        self.collector.terminate()
        self.collector.wait(60)
        self.sink.stdin.close()
        self.sink.wait(60)
        data = dict(np.load(self.sink_output))
        data["memory"] = memory
        data["workers_memory"] = workers
        return data


async def send(channel_call, payload: bytes, refused: list[int]) -> None:
    """Send until accepted; a refusal is retried after the delay the collector asks for,
    as OpenTelemetry SDK exporters do (RetryInfo), else after 50 ms."""
    while True:
        try:
            await channel_call(payload, timeout=30)
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            refused[0] += 1
            if len(refused) == 1:  # when the collector first held all it may: its backlog is full
                refused.append(time.monotonic_ns())
            await asyncio.sleep(retry_delay(exc))


def retry_delay(exc: grpc.aio.AioRpcError) -> float:
    for key, value in exc.trailing_metadata() or ():
        if key == "google.rpc.retryinfo-bin":
            delay = RetryInfo.FromString(value).retry_delay
            return delay.seconds + delay.nanos / 1e9
    return 0.05


async def closed_loop(
    port: int, requests: AgentRequests, seconds: float, in_flight: int = 4, first_refusal: list[int] | None = None
) -> tuple[int, int, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        refused = [0]
        sent = 0
        deadline = time.monotonic() + seconds

        async def worker():
            nonlocal sent
            while time.monotonic() < deadline:
                payload, _ = requests.make()
                await send(call, payload, refused)
                sent += requests.spans_per_request

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        if first_refusal is not None:
            first_refusal.extend(refused[1:])
        return sent, refused[0], time.monotonic() - started


async def open_loop(port: int, requests: AgentRequests, rate: float, seconds: float):
    """Offer `rate` spans/s; return (send time ns, trace key) per trace and refusals."""
    interval = requests.spans_per_request / rate
    keys, times = [], []
    refused = [0]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        tasks = set()
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < seconds:
            payload, trace_ids = requests.make()
            target = started + n * interval
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic_ns()
            keys.append(trace_ids[:, :8].copy().view("<u8").ravel())
            times.append(np.full(len(trace_ids), now, dtype=np.int64))
            task = asyncio.create_task(send(call, payload, refused))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        await asyncio.gather(*tasks)
        offered_s = time.monotonic() - started
    return np.concatenate(keys), np.concatenate(times), refused[0], n * requests.spans_per_request / offered_s


def sustained_rate(data, skip_s: float = WARM_UP_S) -> float:
    times, spans = data["request_times"], data["request_spans"]
    if len(times) < 2:
        return 0.0
    start = times[0] + int(skip_s * 1e9)
    window = times >= start
    duration_s = (times[window][-1] - start) / 1e9
    return spans[window].sum() / duration_s if duration_s > 0 else 0.0


def latencies_ms(sent_keys, sent_times, data) -> np.ndarray:
    order = np.argsort(data["root_keys"])
    arrived_keys, arrived_times = data["root_keys"][order], data["root_times"][order]
    where = np.searchsorted(arrived_keys, sent_keys)
    where = np.clip(where, 0, len(arrived_keys) - 1)
    found = arrived_keys[where] == sent_keys
    return (arrived_times[where][found] - sent_times[found]) / 1e6 - TRACE_WAIT_S * 1e3, found.mean()


def throughput_phase(
    workdir: Path, requests: AgentRequests, compression: str, seconds: float, metrics: bool, workers: int
) -> dict:
    """One closed-loop run; sustained spans/s and each process's CPU per span exported."""
    # With metrics the collector accepts spans faster than it scores them; a bound keeps
    # that backlog (received, not yet exported) from skewing CPU per span, but one below
    # trace_wait's worth plus a queue leaves the collector idle while what it holds waits
    # to become ready (20,000 did here).
    stack = Stack(workdir, compression, metrics=metrics, workers=workers, backlog=60_000 if metrics else 0)
    time.sleep(1.0)  # workers start and the embedder loads
    pids = (stack.collector.pid, *child_pids(stack.collector.pid))
    # CPU is read over a steady-state window: from warm-up, or from when the collector
    # first refused (its backlog full: from then on it takes in what it sends out) if
    # later, to the end of the load; against the spans that reached the sink in that
    # window. Before the backlog fills, spans are received that are scored after it.
    samples: list[tuple[int, list[float]]] = []
    sampling = threading.Event()

    def sample_cpu() -> None:
        while not sampling.wait(0.25):
            samples.append((time.monotonic_ns(), [cpu_seconds(p) for p in pids]))

    sampler = threading.Thread(target=sample_cpu, daemon=True)
    sampler.start()
    first_refusal: list[int] = []
    sent, refused, elapsed = asyncio.run(closed_loop(stack.grpc_port, requests, seconds, first_refusal=first_refusal))
    sampling.set()
    sampler.join()
    samples.append((time.monotonic_ns(), [cpu_seconds(p) for p in pids]))
    start_ns = max(samples[0][0] + int(WARM_UP_S * 1e9), first_refusal[0] if first_refusal else 0)
    (start_ns, cpu_start), (end_ns, cpu_end) = next((x for x in samples if x[0] >= start_ns), samples[-1]), samples[-1]
    time.sleep(TRACE_WAIT_S + 1.5)
    verdicts = score_verdicts(stack.prometheus_port) if metrics else {}
    data = stack.stop()
    times = data["request_times"]
    exported = int(data["request_spans"][(times >= start_ns) & (times <= end_ns)].sum())
    cpu_us = [(end - start) / max(exported, 1) * 1e6 for start, end in zip(cpu_start, cpu_end)]
    return {
        "sent": sent,
        "accepted_per_s": sent / elapsed,
        "received": int(data["request_spans"].sum()),
        "spans_per_export": float(data["request_spans"].mean()) if len(data["request_spans"]) else 0.0,
        "sustained_per_s": sustained_rate(data),
        "refused": refused,
        "window_s": (end_ns - start_ns) / 1e9,
        "collector_cpu_us": cpu_us[0],
        "workers_cpu_us": cpu_us[1:],
        "collector_peak_rss_mib": data["memory"]["VmHWM"] / 1024,
        "workers_peak_rss_mib": [w["VmHWM"] / 1024 for w in data["workers_memory"]],
        "verdicts": verdicts,
    }


def score_verdicts(port: int) -> dict[str, dict[str, float]]:
    """Per metric, results by label so far, from the collector's own score metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    verdicts: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gen_ai_evaluation_results_total":
                by_label = verdicts.setdefault(sample.labels["gen_ai_evaluation_name"], {})
                label = sample.labels["gen_ai_evaluation_score_label"]
                by_label[label] = by_label.get(label, 0) + sample.value
    return verdicts


def core_at_rate(workdir: Path, requests: AgentRequests, compression: str, rate: float) -> dict:
    """The collector core's CPU per span with `rate` spans/s offered, over 10 s after warm-up."""
    stack = Stack(workdir, compression)
    offered_s = WARM_UP_S + 10.0

    async def load() -> tuple[float, float]:
        loading = asyncio.create_task(open_loop(stack.grpc_port, requests, rate, offered_s))
        await asyncio.sleep(WARM_UP_S)
        started, cpu_started = time.monotonic(), cpu_seconds(stack.collector.pid)
        await asyncio.sleep(offered_s - WARM_UP_S - 0.5)
        cpu, elapsed = cpu_seconds(stack.collector.pid) - cpu_started, time.monotonic() - started
        await loading
        return cpu, elapsed

    cpu, elapsed = asyncio.run(load())
    time.sleep(TRACE_WAIT_S + 1.5)
    stack.stop()
    return {"offered_per_s": rate, "collector_cpu_us": cpu / (rate * elapsed) * 1e6}


def projection(core_us: float, collector_us: float, workers_us: float) -> list[dict]:
    """Spans/s on n cores, a core each for the collector process and n-1 workers (client
    and sink elsewhere): the collector's ceiling or the workers' sum, whichever binds."""
    rows = []
    for cores in PROJECTED_CORES:
        collector, workers = 1e6 / collector_us, (cores - 1) * 1e6 / workers_us
        rows.append(
            {
                "cores": cores,
                "spans_per_s": min(collector, workers),
                "bound_by": "collector process" if collector < workers else "workers",
                "of_core": min(collector, workers) / (1e6 / core_us),
            }
        )
    return rows


def print_phase(label: str, phase: dict, core: dict | None) -> None:
    print(
        f"throughput, {label}: sent {phase['sent']} spans ({phase['accepted_per_s']:,.0f}/s accepted), "
        f"sink received {phase['received']}; sustained at sink after warm-up: {phase['sustained_per_s']:,.0f} spans/s"
        + (f" ({phase['sustained_per_s'] / core['sustained_per_s']:.0%} of the core's)" if core else "")
        + f"; {phase['spans_per_export']:.0f} spans per export request; refused (retried) {phase['refused']} requests"
        + f"; collector peak RSS {phase['collector_peak_rss_mib']:.0f} MiB"
        + "".join(f", worker peak RSS {w:.0f} MiB" for w in phase["workers_peak_rss_mib"])
    )
    line = (
        f"  CPU per span that reached the sink, over {phase['window_s']:.1f}s of steady state: "
        f"collector process {phase['collector_cpu_us']:.1f} us"
    )
    if core:
        line += f" ({phase['collector_cpu_us'] / core['collector_cpu_us']:.1f}x the core's)"
    line += "".join(f", worker {i} {us:.1f} us" for i, us in enumerate(phase["workers_cpu_us"], 1))
    print(line)
    if phase["verdicts"]:
        print(
            "  verdicts: "
            + "; ".join(
                f"{metric} " + ", ".join(f"{label} {n / sum(by.values()):.0%}" for label, n in sorted(by.items()))
                for metric, by in sorted(phase["verdicts"].items())
            )
        )
    if core and phase["workers_cpu_us"]:
        rows = projection(core["collector_cpu_us"], phase["collector_cpu_us"], sum(phase["workers_cpu_us"]))
        phase["projected"] = rows
        print_projection("projected, a core for the collector and one per other worker", rows)


def print_projection(label: str, rows: list[dict]) -> None:
    print(
        f"  {label}: "
        + ", ".join(
            f"{r['cores']} cores {r['spans_per_s']:,.0f} spans/s ({r['of_core']:.0%} of the core's, "
            f"bound by the {r['bound_by']})"
            for r in rows
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=50_000.0, help="offered spans/s in the latency phase")
    parser.add_argument("--compression", choices=["none", "gzip"], default="none")
    parser.add_argument("--buffered", type=int, default=100_000)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[0, 1, 2],
        help="scoring_workers settings to measure the default config with (0: in the collector process)",
    )
    parser.add_argument("--only-throughput", action="store_true", help="skip the latency and memory phases")
    parser.add_argument("--json", type=Path, help="also write the throughput figures to this file")
    args = parser.parse_args()
    if any(n < 0 for n in args.workers):
        parser.error("--workers: counts of 0 or more")
    requests = AgentRequests(conversations=True, failing_every=FAILING_EVERY)
    print(
        f"spans: {requests.bytes_per_span:.0f} bytes, 6 attributes, {requests.spans_per_request} per request, "
        f"{requests.spans_per_trace} per trace, {requests.traces_per_session} traces per session (a different "
        f"exchange each turn; tool calls failed in 1 trace of {FAILING_EVERY}); "
        f"exporter compression {args.compression}; {os.cpu_count()} cores shared by client, collector and sink; "
        f"default config: {', '.join(DEFAULT_PROCESSORS[1:])} (static embedder, no judge) and score metrics"
    )

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        core = throughput_phase(workdir, requests, args.compression, args.seconds, metrics=False, workers=0)
        print_phase("collector core", core, None)
        figures = {"core": core, "default": {}}
        for workers in args.workers:
            phase = throughput_phase(workdir, requests, args.compression, args.seconds, metrics=True, workers=workers)
            label = "default config, " + (f"scoring_workers: {workers}" if workers else "scored in process")
            print_phase(label, phase, core)
            figures["default"][workers] = phase
        if max(args.workers, default=0) > 0:
            # The core's CPU per span grows at lower rates (smaller batches, more wake-ups):
            # the core offered the rate the most workers sustained, for a like-for-like figure.
            most = figures["default"][max(args.workers)]
            figures["core_at_rate"] = core_at_rate(workdir, requests, args.compression, most["sustained_per_s"])
            at_rate_us = figures["core_at_rate"]["collector_cpu_us"]
            print(
                f"  the collector core offered the same {most['sustained_per_s']:,.0f} spans/s: collector process "
                f"{at_rate_us:.1f} us per span ({most['collector_cpu_us'] / at_rate_us:.1f}x that with "
                f"scoring_workers: {max(args.workers)})"
            )
            # At a core each the collector runs near its ceiling, where the core's share of
            # its work costs what the saturated core pays; what workers add per span (the
            # hand-over and the answers, per trace) is taken as measured at this rate.
            added_us = max(0.0, most["collector_cpu_us"] - at_rate_us)
            modelled_us = core["collector_cpu_us"] + added_us
            rows = projection(core["collector_cpu_us"], modelled_us, sum(most["workers_cpu_us"]))
            figures["projected_at_ceiling"] = {"collector_cpu_us": modelled_us, "added_us": added_us, "rows": rows}
            print(
                f"  what scoring workers add to the collector process at that rate: {added_us:.1f} us per span; "
                f"with the core's work at its saturated cost, {modelled_us:.1f} us per span "
                f"({modelled_us / core['collector_cpu_us']:.1f}x the core's)"
            )
            print_projection("projected that way", rows)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=1))

        if args.only_throughput:
            return
        stack = Stack(workdir, args.compression)
        keys, times, refused, offered = asyncio.run(open_loop(stack.grpc_port, requests, args.rate, args.seconds))
        time.sleep(TRACE_WAIT_S + 1.5)
        data = stack.stop()
        latency, found = latencies_ms(keys, times, data)
        print(
            f"latency at {offered:,.0f} spans/s offered: {len(latency)} traces ({found:.1%} of sent) forwarded; "
            f"added beyond trace_wait p50 {np.percentile(latency, 50):.0f} ms, "
            f"p99 {np.percentile(latency, 99):.0f} ms, max {latency.max():.0f} ms; refused {refused}; "
            f"collector peak RSS {data['memory']['VmHWM'] / 1024:.0f} MiB"
        )

        for label, metrics in (("collector core", False), ("metrics on (static embedder)", True)):
            stack = Stack(workdir, args.compression, trace_wait="10m", extra=", trace_timeout: 20m", metrics=metrics)
            time.sleep(1.0)  # the embedder loads in the background at start
            idle = memory_kib(stack.collector.pid)["VmRSS"]
            n_requests = -(-args.buffered // requests.spans_per_request)
            asyncio.run(closed_loop_count(stack.grpc_port, requests, n_requests))
            time.sleep(2.0)
            held = memory_kib(stack.collector.pid)
            stack.collector.terminate()  # flushes (and with metrics scores) all buffered spans on the way out
            stack.collector.wait(120)
            stack.sink.stdin.close()
            stack.sink.wait(60)
            flushed = int(np.load(stack.sink_output)["request_spans"].sum())
            print(
                f"memory, {label}: {n_requests * requests.spans_per_request} spans buffered: RSS "
                f"{held['VmRSS'] / 1024:.0f} MiB (idle {idle / 1024:.0f} MiB, peak {held['VmHWM'] / 1024:.0f} MiB); "
                f"{flushed} spans flushed at shutdown"
            )


async def closed_loop_count(port: int, requests: AgentRequests, n_requests: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        refused = [0]
        for _ in range(n_requests):
            await send(call, requests.make()[0], refused)


if __name__ == "__main__":
    main()
