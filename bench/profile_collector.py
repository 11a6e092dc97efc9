"""Where the collector process spends its CPU under load: py-spy samples, summed per function.

    python bench/profile_collector.py [--workers 0|1|2|...] [--core] [--seconds 12] [--top 25]

Starts the same stack as bench/ingest.py's throughput phase (a sink, a collector with
the no-LLM metrics, or the core alone with `--core`), loads it closed-loop, and samples
the collector process (not its workers) with py-spy for the steady-state part of the
load, only the thread holding the GIL: one Python thread at a time runs, so that thread
is the process's ceiling. Prints the functions with the most samples, on their own
(self) and with what they call (inclusive), as shares of the samples.

py-spy is not a dependency of spanscore: `pip install py-spy` first. It reads another
process's memory, so it needs ptrace permission (root, or CAP_SYS_PTRACE in a container).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_spans import AgentRequests  # noqa: E402
from bench.ingest import FAILING_EVERY, WARM_UP_S, Stack, closed_loop  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def frame_label(frame: str) -> str:
    """`function (path:line)` as py-spy writes it, shortened to `function (module file)`."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", str(ROOT) + "/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def summarize(raw: Path, top: int) -> None:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    busy = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame_label(f) for f in stack.split(";") if f]
        if not frames:
            continue
        n = int(count)
        busy += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not busy:
        print("no samples holding the GIL")
        return
    print(f"{busy} samples holding the GIL")
    for title, counter in (("self", own), ("inclusive", inclusive)):
        print(f"top {top} by {title} time:")
        for frame, n in counter.most_common(top):
            print(f"  {n / busy:6.1%}  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="scoring_workers (0: scored in the collector)")
    parser.add_argument("--core", action="store_true", help="the collector core alone, no metrics")
    parser.add_argument("--seconds", type=float, default=12.0, help="how long py-spy samples")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = parser.parse_args()
    if args.workers < 0 or args.seconds < 1 or args.top < 1 or args.rate < 1:
        parser.error("--workers: 0 or more; --seconds, --top and --rate: 1 or more")
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        sys.exit("py-spy is not installed: pip install py-spy")
    requests = AgentRequests(conversations=True, failing_every=FAILING_EVERY)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        metrics = not args.core
        stack = Stack(
            workdir,
            "none",
            metrics=metrics,
            workers=args.workers if metrics else 0,
            backlog=60_000 if metrics else 0,
        )
        time.sleep(1.0)
        raw = workdir / "profile.txt"
        command = [py_spy, "record", "--format", "raw", "--rate", str(args.rate), "--gil", "--nonblocking"]
        command += ["--duration", str(int(args.seconds)), "--output", str(raw), "--pid", str(stack.collector.pid)]

        async def load_and_sample() -> subprocess.Popen:
            loading = asyncio.create_task(closed_loop(stack.grpc_port, requests, WARM_UP_S + args.seconds + 1.0))
            await asyncio.sleep(WARM_UP_S)  # sampled once the backlog is full and the stack steady
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            await loading
            return spy

        spy = asyncio.run(load_and_sample())
        _, errors = spy.communicate(timeout=60)
        stack.stop()
        if spy.returncode != 0 or not raw.exists():
            sys.exit(f"py-spy failed: {errors.strip()[-500:]}")
        label = "core" if args.core else f"metrics, scoring_workers: {args.workers}"
        print(f"collector process ({label}), {args.seconds:.0f}s under closed-loop load")
        summarize(raw, args.top)


if __name__ == "__main__":
    main()
