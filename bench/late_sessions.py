"""What remembering closed sessions for late traces costs: bytes and time per trace.

    python bench/late_sessions.py [--sessions 20000] [--traces-per-session 5] [--metrics 4]

With `late_spans: rescore` a closing session is kept for `late_window` (at most
`max_open_sessions` of them) so that a late trace can open it again: what stays in memory
is the session's trace summaries (ids, start time, one score per trace metric) and a
shallow copy of the processors' state, which the session held while open anyway; only
its time in memory grows. Reported: the bytes a remembered session holds per trace
(tracemalloc, summaries with `--metrics` scores each, no processor state), the time of
remembering one at its close and of opening one again (its summaries copied). Best of
three rounds, on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402

from spanscore.core.session import Session, TraceSummary  # noqa: E402
from spanscore.pipeline.counts import PipelineCounts  # noqa: E402
from spanscore.pipeline.sessions import Sessions  # noqa: E402


def sessions_of(count: int, traces: int, metrics: int) -> list[Session]:
    resource = Resource()
    names = [f"metric_{i}" for i in range(metrics)]
    return [
        Session(
            f"session-{n}",
            resource,
            0.0,
            traces=[
                TraceSummary(os.urandom(16), os.urandom(8), n, True, {name: 0.5 + i / 100 for name in names})
                for i in range(traces)
            ],
        )
        for n in range(count)
    ]


def keeper(count: int) -> Sessions:
    return Sessions(
        OrderedDict(), 60.0, count, None, None, None, PipelineCounts(1), lambda: 0.0, late_window=600.0, max_rescores=3
    )  # type: ignore[arg-type]  # no scoring, attacher or fan-out: only remembering is timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--traces-per-session", type=int, default=5)
    parser.add_argument("--metrics", type=int, default=4)
    args = parser.parse_args()
    traces = args.sessions * args.traces_per_session

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    sessions = sessions_of(args.sessions, args.traces_per_session, args.metrics)
    kept = keeper(args.sessions)
    for session in sessions:
        kept._remember(session)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del kept

    remember_s = reopen_s = float("inf")
    for _ in range(3):
        kept = keeper(args.sessions)
        started = time.perf_counter()
        for session in sessions:
            kept._remember(session)
        remember_s = min(remember_s, time.perf_counter() - started)
        started = time.perf_counter()
        for session in sessions:
            kept._reopen(session.session_id, 1.0)
        reopen_s = min(reopen_s, time.perf_counter() - started)

    print(f"{args.sessions} sessions of {args.traces_per_session} traces, {args.metrics} trace metrics each")
    print(f"memory held per remembered session: {held / args.sessions:.0f} bytes ({held / traces:.0f} per trace)")
    print(f"remembering a session at its close: {remember_s / args.sessions * 1e6:.2f} us")
    print(f"opening one again: {reopen_s / args.sessions * 1e6:.2f} us ({reopen_s / traces * 1e6:.2f} us per trace)")


if __name__ == "__main__":
    main()
