"""`spanscore score --phoenix`: pull and score rate and memory on a real Phoenix.

    SPANSCORE_PHOENIX_PYTHON=/path/to/phoenix-venv/bin/python \\
        python bench/phoenix_backfill.py [--spans 100000] [--load-budget 300] [--config otel-config.yaml]
                                         [--phoenix-dir DIR [--load-only]]

Starts Phoenix on loopback (as the tests do, tests/support/phoenix_server.py), sends it
agent-like spans over OTLP/HTTP (bench.agent_spans: 512 a request, 8 a trace, 4 traces a
session) until `--spans` or until `--load-budget` seconds of loading, waits until Phoenix
lists the last trace sent, then runs `spanscore score --phoenix URL --project bench` as a
user runs it, twice: `-o FILE` (pull and score), then `-o FILE --write-back` (and the
annotations written). Reports each run's time, spans/s, the machine's load average before
and after, the peak RSS of the spanscore process and its RSS sampled at 1k/10k/35k/70k/95k
spans done. The config's processors score (default: the project's otel-config.yaml,
whose judge metrics stay off without OPENAI_API_KEY).

`--phoenix-dir DIR` keeps Phoenix's working directory: the first run loads DIR (and
records what it loaded there), later runs reuse it as it is, so a 100k-span load (about
20 minutes: Phoenix stores 50 to 150 spans a second here) is done once; `--load-only`
stops after loading.

Measured on 100,352 spans (12,544 traces) on a 2-core machine shared with other test
runs: pull and score 285 spans/s (load average 0.58 before, 4.59 after), with
--write-back 208 spans/s (4.59 before, 4.96 after, beside a test run of ours); peak RSS
1,127 MiB, RSS 877 MiB at 35,000 spans and 1,025 MiB at 95,000 (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
LOADED = "spanscore-bench-load.json"  # in a kept working directory: what was loaded into it


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


PROGRESS = re.compile(r"spanscore score: .*?, ([\d,]+) spans? \(")  # offline/backfill.py's plain progress line
SAMPLE_S = 0.5


def run(args: list[str], stderr_path: Path) -> tuple[float, int, list[tuple[int, int]]]:
    """(seconds, the peak RSS in MiB of this `spanscore score` process from its own rusage,
    (spans done, RSS in MiB) sampled as it runs: the spans from its progress lines, the
    RSS from /proc)."""
    started = time.monotonic()
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    samples: list[tuple[int, int]] = []
    with stderr_path.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "spanscore", "score", *args],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=environment,
        )
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            done = PROGRESS.findall(stderr_path.read_text(errors="replace"))
            samples.append((int(done[-1].replace(",", "")) if done else 0, _rss_mib(child.pid)))
            time.sleep(SAMPLE_S)
        child.returncode = os.waitstatus_to_exitcode(status)  # waited for here, not by Popen
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"spanscore score failed:\n{stderr_path.read_text()}")
    return seconds, usage.ru_maxrss // 1024, samples


def _rss_mib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass  # it has just ended
    return 0


def rss_by_spans(samples: list[tuple[int, int]], marks: tuple[int, ...]) -> str:
    """The RSS when the progress first reached each of `marks` spans."""
    shown = []
    for mark in marks:
        reached = [rss for spans, rss in samples if spans >= mark and rss]
        if reached:
            shown.append(f"{mark:,} spans {reached[0]} MiB")
    return ", ".join(shown)


def loaded_spans(phoenix: PhoenixServer, spans: int, budget_s: float) -> tuple[int, int]:
    """(spans, traces) in the project: loaded now, or earlier into a kept working directory
    (its LOADED record says how many)."""
    record = phoenix.directory / LOADED
    if phoenix.keep_directory and record.exists():
        loaded = json.loads(record.read_text())
        print(f"reusing {loaded['spans']:,} spans ({loaded['traces']:,} traces) loaded into {phoenix.directory}")
        return loaded["spans"], loaded["traces"]
    spans, traces, loaded_s, last_trace = load(phoenix, spans, budget_s)
    print(f"loaded {spans:,} spans ({traces:,} traces) into Phoenix in {loaded_s:.0f}s ({spans / loaded_s:,.0f}/s)")
    if phoenix.keep_directory:
        record.write_text(json.dumps({"spans": spans, "traces": traces, "seconds": loaded_s, "last_trace": last_trace}))
    return spans, traces


RSS_MARKS = (1_000, 10_000, 35_000, 70_000, 95_000)  # the last progress line comes a little before the end


def _load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--load-budget", type=float, default=300.0, help="seconds of loading at most")
    parser.add_argument("--config", default=str(ROOT / "otel-config.yaml"))
    parser.add_argument(
        "--phoenix-dir",
        type=Path,
        help="Phoenix's working directory, kept: loaded on the first run, reused as it is afterwards",
    )
    parser.add_argument("--load-only", action="store_true", help="load (into --phoenix-dir) and stop")
    args = parser.parse_args()
    python, reason = phoenix_python()
    if python is None:
        raise SystemExit(reason)
    if args.load_only and args.phoenix_dir is None:
        parser.error("--load-only needs --phoenix-dir, or the load is lost")
    with PhoenixServer(python, working_dir=args.phoenix_dir) as phoenix, tempfile.TemporaryDirectory() as tmp:
        print(f"Phoenix started in {phoenix.started_in_s:.1f}s")
        spans, traces = loaded_spans(phoenix, args.spans, args.load_budget)
        if args.load_only:
            return
        # Not --quiet: its progress lines, a line each 5 s, say how far it got when the RSS is sampled.
        pull = ["--phoenix", phoenix.url, "--project", PROJECT, "--config", args.config]
        for label, extra in (("pull and score, -o", []), ("pull, score and --write-back, -o", ["--write-back"])):
            output = Path(tmp) / "scored.jsonl"
            state = Path(tmp) / "pull.json"
            print(f"load average before: {_load_average()}")
            seconds, peak_mib, samples = run(
                [*pull, "-o", str(output), "--state", str(state), *extra], Path(tmp) / "stderr"
            )
            print(
                f"{label}: {spans:,} spans in {seconds:.1f}s = {spans / seconds:,.0f} spans/s "
                f"({traces / seconds:,.0f} traces/s); peak RSS {peak_mib} MiB; "
                f"output {output.stat().st_size / 2**20:.0f} MiB; load average after: {_load_average()}"
            )
            print(f"  RSS at {rss_by_spans(samples, RSS_MARKS)}")


if __name__ == "__main__":
    main()
