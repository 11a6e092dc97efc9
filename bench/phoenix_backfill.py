"""`spanscore score --phoenix`: pull and score rate and peak memory on a real Phoenix.

    SPANSCORE_PHOENIX_PYTHON=/path/to/phoenix-venv/bin/python \\
        python bench/phoenix_backfill.py [--spans 100000] [--load-budget 300] [--config otel-config.yaml]

Starts Phoenix on loopback (as the tests do, tests/support/phoenix_server.py), sends it
agent-like spans over OTLP/HTTP (bench.agent_spans: 512 a request, 8 a trace, 4 traces a
session) until `--spans` or until `--load-budget` seconds of loading, waits until Phoenix
lists the last trace sent, then runs `spanscore score --phoenix URL --project bench` as a
user runs it, twice: `-o FILE` (pull and score), then `-o FILE --write-back` (and the
annotations written). Reports each run's time, spans/s and the peak RSS of the
spanscore process. The config's processors score (default: the project's
otel-config.yaml, whose judge metrics stay off without OPENAI_API_KEY).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from tests.support.phoenix_server import PhoenixServer, phoenix_python, wait_for  # noqa: E402

PROJECT = "bench"


def load(phoenix: PhoenixServer, spans: int, budget_s: float) -> tuple[int, int, float, str]:
    """Send requests until `spans` or the budget; (spans, traces, seconds until Phoenix
    lists the last trace, that trace's id)."""
    generator = AgentRequests(seed=1)
    started = time.monotonic()
    sent = traces = 0
    last_trace = ""
    while sent < spans and time.monotonic() - started < budget_s:
        body = generator.make()[0]
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    sent += 1
                    if not span.parent_span_id:
                        traces += 1
                        last_trace = span.trace_id.hex()
        post = urllib.request.Request(
            f"{phoenix.url}/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf", "x-project-name": PROJECT},
        )
        while True:
            try:
                with urllib.request.urlopen(post, timeout=60):
                    break
            except urllib.error.HTTPError as error:
                if error.code != 503:
                    raise
                time.sleep(0.5)  # Phoenix's ingestion queue is full: its own backpressure

    def listed() -> bool:
        try:
            return bool(phoenix.get(f"/v1/projects/{PROJECT}/spans", trace_id=[last_trace], limit=10)["data"])
        except AssertionError:
            return False  # no project yet

    wait_for(listed, bool, timeout_s=900, interval_s=1.0)
    return sent, traces, time.monotonic() - started, last_trace


def run(args: list[str], stderr_path: Path) -> tuple[float, int]:
    """(seconds, the peak RSS in MiB of this `spanscore score` process, from its own rusage)."""
    started = time.monotonic()
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    with stderr_path.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "score", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=environment,
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)  # waited for here, not by Popen
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"spanscore score failed:\n{stderr_path.read_text()}")
    return seconds, usage.ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--load-budget", type=float, default=300.0, help="seconds of loading at most")
    parser.add_argument("--config", default=str(ROOT / "otel-config.yaml"))
    args = parser.parse_args()
    python, reason = phoenix_python()
    if python is None:
        raise SystemExit(reason)
    with PhoenixServer(python) as phoenix, tempfile.TemporaryDirectory() as tmp:
        print(f"Phoenix started in {phoenix.started_in_s:.1f}s")
        spans, traces, loaded_s, _ = load(phoenix, args.spans, args.load_budget)
        print(f"loaded {spans:,} spans ({traces:,} traces) into Phoenix in {loaded_s:.0f}s ({spans / loaded_s:,.0f}/s)")
        pull = ["--phoenix", phoenix.url, "--project", PROJECT, "--config", args.config, "--quiet"]
        for label, extra in (("pull and score, -o", []), ("pull, score and --write-back, -o", ["--write-back"])):
            output = Path(tmp) / "scored.jsonl"
            state = Path(tmp) / "pull.json"
            seconds, peak_mib = run([*pull, "-o", str(output), "--state", str(state), *extra], Path(tmp) / "stderr")
            print(
                f"{label}: {spans:,} spans in {seconds:.1f}s = {spans / seconds:,.0f} spans/s "
                f"({traces / seconds:,.0f} traces/s); peak RSS {peak_mib} MiB; "
                f"output {output.stat().st_size / 2**20:.0f} MiB"
            )


if __name__ == "__main__":
    main()
