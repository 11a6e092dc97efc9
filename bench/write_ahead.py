"""Write-ahead cost and recovery: the same loopback gRPC load with `file_storage` off and on.

    python bench/write_ahead.py [--seconds 15] [--rate 30000] [--buffered 100000]

For write-ahead off, on with `fsync: batch` (group commit) and on with `fsync: always`
(one fsync per request), each against a fresh `spanscore run` (collector core, no
metrics) exporting to a loopback sink: sustained throughput (closed loop, as in
`bench/ingest.py`) and the added latency at `--rate` offered spans/s (p50, p99, beyond
trace_wait). Then recovery: `--buffered` spans acknowledged and held (long trace_wait),
the collector killed with SIGKILL, started again on the same directory: the time from
start until the port accepts, and until every replayed span reached the sink.
The log lives in a temporary directory on this machine's disk; figures are for one run.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_spans import AgentRequests  # noqa: E402
from bench.ingest import (  # noqa: E402
    ROOT,
    TRACE_WAIT_S,
    Stack,
    closed_loop,
    closed_loop_count,
    latencies_ms,
    open_loop,
    sustained_rate,
    wait_for_port,
)


def storage(directory: Path, fsync: str) -> str:
    return f"extensions: {{file_storage: {{directory: '{directory}', fsync: {fsync}}}}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=30_000.0)
    parser.add_argument("--buffered", type=int, default=100_000)
    args = parser.parse_args()
    requests = AgentRequests()
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        workdir = Path(tmp)
        print(
            f"write-ahead log in {workdir} (filesystem of {Path.home()}); "
            f"{requests.spans_per_request} spans per request"
        )
        baseline = None
        for label, fsync in (("write-ahead off", None), ("fsync batch", "batch"), ("fsync always", "always")):
            extra = storage(workdir / f"wal-{fsync}", fsync) if fsync else ""
            stack = Stack(workdir, "none", storage=extra)
            sent, refused, elapsed = asyncio.run(closed_loop(stack.grpc_port, requests, args.seconds))
            time.sleep(TRACE_WAIT_S + 1.5)
            data = stack.stop()
            rate = sustained_rate(data)
            baseline = baseline or rate
            stack = Stack(workdir, "none", storage=extra)
            keys, times, refused_open, offered = asyncio.run(
                open_loop(stack.grpc_port, requests, args.rate, args.seconds)
            )
            time.sleep(TRACE_WAIT_S + 1.5)
            latency, found = latencies_ms(keys, times, stack.stop())
            print(
                f"{label}: sustained {rate:,.0f} spans/s ({rate / baseline:.0%} of write-ahead off); at "
                f"{offered:,.0f} spans/s offered, added latency p50 {np.percentile(latency, 50):.0f} ms, "
                f"p99 {np.percentile(latency, 99):.0f} ms ({found:.1%} of traces forwarded)"
            )

        directory = workdir / "wal-recovery"
        extra = storage(directory, "batch")
        stack = Stack(workdir, "none", trace_wait="10m", extra=", trace_timeout: 20m", storage=extra)
        n_requests = -(-args.buffered // requests.spans_per_request)
        asyncio.run(closed_loop_count(stack.grpc_port, requests, n_requests))
        stack.collector.send_signal(signal.SIGKILL)
        stack.collector.wait(30)
        on_disk = sum(p.stat().st_size for p in directory.glob("*.wal"))
        config = next(workdir.glob(f"config-{stack.grpc_port}.yaml"))
        config.write_text(config.read_text().replace("trace_wait: 10m", "trace_wait: 1s"))
        started = time.monotonic()
        stack.collector = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "run", "--config", str(config)], cwd=ROOT
        )
        wait_for_port(stack.grpc_port, timeout_s=300)
        accepting_s = time.monotonic() - started
        stack.collector.send_signal(signal.SIGTERM)  # flushes every replayed trace
        stack.collector.wait(300)
        flushed_s = time.monotonic() - started
        stack.sink.stdin.close()
        stack.sink.wait(60)
        delivered = int(np.load(stack.sink_output)["request_spans"].sum())
        print(
            f"recovery: {n_requests * requests.spans_per_request} spans acknowledged and held, "
            f"log {on_disk / 2**20:.1f} MiB; after SIGKILL, restart accepting in {accepting_s:.1f} s, "
            f"all {delivered} spans at the sink "
            f"{flushed_s:.1f} s after start (including shutdown)"
        )


if __name__ == "__main__":
    main()
