"""Cost of normalizing one trace: `build_agent_trace` in microseconds per trace.

    python bench/agent_trace.py [--requests 10] [--rounds 7]

Two workloads, each timed in-process with the spans already decoded:
- bench: the 8-span agent traces of `bench.agent_spans.AgentRequests` (OTel GenAI,
  one agent root, tool and chat children), gathered by the collector's assembler as
  on its hot path;
- each captured fixture in tests/fixtures/spans (real instrumentation libraries, one
  convention each) and tests/fixtures/spans/frameworks (real agent frameworks).
A figure is the best of `--rounds` rounds (each round builds every trace of the
workload at least ~0.2 s worth), which filters out scheduler noise on a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402
from spanscore.processors.agent_trace import build_agent_trace  # noqa: E402
from tests.support.agent_fixtures import SPANS_DIR, load_spans  # noqa: E402
from tests.support.otlp_json import read_requests, spans_by_trace  # noqa: E402

# One trace as build_agent_trace takes it: (trace_id, spans, session_id).
Case = tuple[bytes, list, Any]
Build = Callable[..., Any]


def bench_cases(requests: int) -> list[Case]:
    generator = AgentRequests(seed=1)
    assembler = Assembler(PipelineSettings())
    for _ in range(requests):
        assembler.add(ExportTraceServiceRequest.FromString(generator.make()[0]), 0.0)
    return [(t.trace_id, list(t.spans()), t.session_id) for t in assembler.pop_all()]


def fixture_cases() -> dict[str, list[Case]]:
    cases = {}
    for path in sorted(SPANS_DIR.glob("*.jsonl")):
        trace_id, spans = load_spans(path.stem)
        cases[path.stem] = [(trace_id, spans, None)]
    # The framework captures: two turns, so two traces, each.
    for path in sorted((SPANS_DIR / "frameworks").glob("*.jsonl")):
        traces = spans_by_trace(read_requests(path))
        cases[path.stem] = [(trace_id, spans, None) for trace_id, spans in traces.items()]
    return cases


def workloads(requests: int) -> dict[str, list[Case]]:
    return {"bench": bench_cases(requests), **fixture_cases()}


def us_per_trace(build: Build, cases: Sequence[Case], rounds: int, min_seconds: float = 0.2) -> float:
    """Best-of-`rounds` microseconds per trace."""
    start = time.perf_counter()
    for trace_id, spans, session in cases:
        build(trace_id, spans, session_id=session)
    once = max(time.perf_counter() - start, 1e-6)
    repeat = max(1, int(min_seconds / once))
    best = float("inf")
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(repeat):
                for trace_id, spans, session in cases:
                    build(trace_id, spans, session_id=session)
            best = min(best, time.perf_counter() - start)
            gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return best / (repeat * len(cases)) * 1e6


def span_count(cases: Sequence[Case]) -> float:
    return sum(len(spans) for _, spans, _ in cases) / len(cases)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10, help="bench requests of 64 traces each")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"{'workload':<26}{'traces':>7}{'spans/trace':>13}{'us/trace':>11}{'us/span':>10}")
    for name, cases in workloads(args.requests).items():
        us = us_per_trace(build_agent_trace, cases, args.rounds)
        spans = span_count(cases)
        print(f"{name:<26}{len(cases):>7}{spans:>13.1f}{us:>11.1f}{us / spans:>10.2f}")


if __name__ == "__main__":
    main()
