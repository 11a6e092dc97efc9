"""What keeping the traces that left with results to follow costs, with file_storage.

    python bench/pending_copies.py [--traces 5000] [--spans-per-trace 8]

Agent-like traces (bench/agent_spans.py, ~440 bytes a span) are assembled as the intake
keeps them, then each is kept as the scheduler keeps a trace that leaves at `max_hold`
with the seven judge metrics pending (extensions/pending_copies: its spans as export
request bytes, sliced from the request's bytes, and the metrics' names), then marked
done as when its results followed. Reported: the time per trace and per span of keeping
the copy and of marking it done, the bytes on disk per span, and the start's cost of
taking the copies back (reading the file, rewriting it, parsing each trace's spans).
fsync is `never`, so that the figures are the writes', not the disk's. Best of three
rounds, on whatever machine runs it. The default, 5,000 traces, is `max_following_traces`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.late_rescores import assembled  # noqa: E402
from spanscore.extensions.pending_copies import FILE_NAME, PendingCopies  # noqa: E402
from spanscore.pipeline.encoded_trace import origins_request, request_origins  # noqa: E402
from spanscore.pipeline.worker_messages import received_trace, trace_origins  # noqa: E402

JUDGE_METRICS = (
    "task_completion",
    "tool_correctness",
    "argument_correctness",
    "step_efficiency",
    "plan_adherence",
    "plan_quality",
    "confidence",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5_000)
    parser.add_argument("--spans-per-trace", type=int, default=8)
    args = parser.parse_args()
    traces = assembled(args.traces, args.spans_per_trace)
    spans = sum(trace.span_count for trace in traces)
    keep_s = done_s = start_s = float("inf")
    for _ in range(3):
        with tempfile.TemporaryDirectory() as directory:
            copies = PendingCopies(Path(directory), fsync="never")
            copies.open()
            started = time.perf_counter()
            for trace in traces:
                copies.keep(trace.trace_id, JUDGE_METRICS, origins_request(trace_origins(trace)))
            keep_s = min(keep_s, time.perf_counter() - started)
            on_disk = copies.bytes_on_disk
            copies.close()

            started = time.perf_counter()
            reopened = PendingCopies(Path(directory), fsync="never")
            restored = [received_trace((c.trace_id, None, 1, request_origins(c.spans))) for c in reopened.open()]
            start_s = min(start_s, time.perf_counter() - started)
            assert sum(trace.span_count for trace in restored) == spans

            started = time.perf_counter()
            for trace in traces:
                reopened.done(trace.trace_id)
            done_s = min(done_s, time.perf_counter() - started)
            reopened.close()
            assert (Path(directory) / FILE_NAME).stat().st_size < on_disk  # compacted as records were done
    print(f"{len(traces)} traces of {args.spans_per_trace} spans ({spans} spans), {len(JUDGE_METRICS)} metrics pending")
    print(f"keep: {keep_s / len(traces) * 1e6:.1f} us a trace, {keep_s / spans * 1e6:.2f} us a span")
    print(f"done: {done_s / len(traces) * 1e6:.1f} us a trace (compactions included)")
    print(f"on disk: {on_disk / spans:.0f} bytes a span, {on_disk / 2**20:.1f} MiB in all")
    print(f"start: {len(traces)} traces taken back in {start_s:.2f} s ({start_s / spans * 1e6:.1f} us a span)")


if __name__ == "__main__":
    main()
