"""What keeping traces for late spans costs: time per released trace, bytes per span.

    python bench/late_rescores.py [--traces 20000] [--spans-per-trace 8]

Agent-like traces (bench/agent_spans.py, ~440 bytes a span) are assembled, then each is
remembered as the scheduler does when it releases one for scoring (`late_spans:
rescore`, the default): the copy of its spans kept for `late_window`, sliced from the
request's bytes as the intake keeps them then. Reported: the time per trace and per span
of keeping the copy, the kept span bytes per span (what `late_memory_spans` bounds;
resource and scope bytes, shared per request, come on top), and the time of building one re-score trace from a copy
with one late span. Best of three rounds, on whatever machine runs it.

With file_storage each copy is written to disk too (extensions/rescore_copies):
reported are the time per span that adds to keeping the copy, the bytes on disk per
kept span, and the start's cost of taking the copies back (reading the file, dropping
nothing, rewriting it compacted, parsing the spans into the in-memory copies).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.core.request_wire import RequestWire  # noqa: E402
from spanscore.extensions.rescore_copies import FILE_NAME, RescoreCopies  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.late_rescores import LateRescores  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402


def assembled(traces: int, spans_per_trace: int) -> list:
    requests = AgentRequests(spans_per_request=64 * spans_per_trace, spans_per_trace=spans_per_trace)
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=traces * 2))
    while len(assembler) < traces:
        data = requests.make()[0]  # its bytes kept, as the intake keeps them with re-scoring on
        assembler.add(ExportTraceServiceRequest.FromString(data), 0.0, wire=RequestWire(data))
    return assembler.pop_all()[:traces]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--spans-per-trace", type=int, default=8)
    args = parser.parse_args()
    traces = assembled(args.traces, args.spans_per_trace)
    spans = sum(trace.span_count for trace in traces)
    settings = PipelineSettings(late_memory_spans=spans + 1)
    best = float("inf")
    for _ in range(3):
        late = LateRescores(settings)
        started = time.perf_counter()
        for trace in traces:
            late.remember(trace, 0.0)
        best = min(best, time.perf_counter() - started)
    kept = sum(
        len(span) for remembered in late._traces.values() for _, _, spans, _, _ in remembered.origins for span in spans
    )
    print(f"{len(traces)} traces of {args.spans_per_trace} spans ({spans} spans)")
    print(f"remember: {best / len(traces) * 1e6:.1f} us a trace, {best / spans * 1e6:.2f} us a span")
    print(f"kept: {kept / spans:.0f} bytes a span, {kept / 2**20:.1f} MiB in all")

    straggler = assembled(1, 2)[0]  # a two-span trace standing in for the late spans of each
    rounds = min(len(traces), 2_000)
    best = float("inf")
    for _ in range(3):
        late = LateRescores(settings)
        for trace in traces[:rounds]:
            late.remember(trace, 0.0)
        started = time.perf_counter()
        for trace in traces[:rounds]:
            straggler.trace_id = trace.trace_id
            late.rescore_of(straggler, 1.0)
        best = min(best, time.perf_counter() - started)
    print(f"re-score trace built: {best / rounds * 1e6:.1f} us ({args.spans_per_trace + 2} spans)")
    durable(traces, settings, spans)


def durable(traces: list, settings: PipelineSettings, spans: int) -> None:
    """Keeping the copies on disk as well (fsync `never` so that the figure is the write's, not the disk's)."""
    best = float("inf")
    for _ in range(3):
        with tempfile.TemporaryDirectory() as directory:
            copies = RescoreCopies(Path(directory), fsync="never")
            copies.open()
            late = LateRescores(settings, copies)
            started = time.perf_counter()
            for trace in traces:
                late.remember(trace, 0.0)
            best = min(best, time.perf_counter() - started)
            copies.close()
            on_disk = (Path(directory) / FILE_NAME).stat().st_size
            started = time.perf_counter()
            reopened = RescoreCopies(Path(directory), fsync="never")
            restored = LateRescores(settings, reopened)
            restored.restore(reopened.open(), 0.0)
            start_s = time.perf_counter() - started
            reopened.close()
            assert restored.span_count == spans
    print(f"remember with the copy on disk: {best / spans * 1e6:.2f} us a span")
    print(f"on disk: {on_disk / spans:.0f} bytes a span, {on_disk / 2**20:.1f} MiB in all")
    print(f"start: {spans} kept spans taken back in {start_s:.2f} s ({start_s / spans * 1e6:.1f} us a span)")


if __name__ == "__main__":
    main()
