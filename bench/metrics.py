"""Cost of the no-LLM metrics per trace and per session, through the real processors.

    python bench/metrics.py [--traces 2000] [--minilm-traces 400] [--batch 64]

For each embedder (static, hashing, and minilm when `spanscore[minilm]` is installed) it
runs the `embedding_metrics` processor over agent-like traces (8 spans, GenAI
conventions, 4 traces per session), every trace with fresh texts so the embedding cache
does not hide the embedder's cost, and reports milliseconds per trace: the agent
summary the metrics read (and, for comparison, the full normalized view with steps,
and the floor under both: touching every attribute of every span), then the metrics
themselves, embedding included, one trace at a time and in the pipeline's batches
(`scoring_batch`: one trace per session per batch, one embedding call per batch). Then
the `session_metrics` processor per closed session, and the `failure_localization`
processor (evidence only) over the same traces with the scores they got: the check
whether a run failed on every trace, the localization on the ones that did.
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
from spanscore.core.attributes import any_value_to_python  # noqa: E402
from spanscore.core.session import Session, TraceSummary  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.gc_tuning import tune_for_collector  # noqa: E402
from spanscore.pipeline.ready_queue import ReadyQueue  # noqa: E402
from spanscore.pipeline.settings import DEFAULT_SCORING_BATCH, PipelineSettings  # noqa: E402
from spanscore.processors.agent_trace import agent_summary_of, build_agent_trace  # noqa: E402
from spanscore.processors.agent_trace.build import read_span_views, summarize  # noqa: E402
from spanscore.processors.embedders.minilm import minilm_available  # noqa: E402
from spanscore.processors.embedding_metrics import EmbeddingMetrics, EmbeddingMetricsConfig  # noqa: E402
from spanscore.processors.failure_localization import FailureLocalization, FailureLocalizationConfig  # noqa: E402
from spanscore.processors.session_metrics import SessionMetrics, SessionMetricsConfig  # noqa: E402


def make_traces(count: int) -> list:
    requests = AgentRequests()
    assembler = Assembler(PipelineSettings())
    while len(assembler) < count:
        assembler.add(ExportTraceServiceRequest.FromString(requests.make()[0]), 0.0)
    traces = assembler.pop_all()[:count]
    for i, trace in enumerate(traces):
        # Fresh wording per trace, so every text is a cache miss.
        _rewrite_output(trace, f"Order {i} shipped on day {i % 7} from depot {i % 13}; ticket {i * 7919}.")
    return traces


def _rewrite_output(trace, text: str) -> None:
    for kv in trace.root.attributes:
        if kv.key == "gen_ai.output.messages":
            kv.value.string_value = f'[{{"role":"assistant","parts":[{{"type":"text","content":"{text}"}}]}}]'


def attribute_floor_us(traces: list) -> tuple[float, float]:
    """Microseconds per trace to touch every span's attribute keys, then keys and values.

    No reader of the spans in Python does less than the first: each KeyValue of a
    protobuf (upb) message becomes a Python object when it is touched. This is the floor
    under the agent summary's cost.
    """
    spans = [[span for span, _ in trace.spans()] for trace in traces]
    started = time.perf_counter()
    for trace_spans in spans:
        for span in trace_spans:
            [kv.key for kv in span.attributes]
    keys_s = time.perf_counter() - started
    started = time.perf_counter()
    for trace_spans in spans:
        for span in trace_spans:
            [(kv.key, any_value_to_python(kv.value)) for kv in span.attributes]
    values_s = time.perf_counter() - started
    return keys_s / len(traces) * 1e6, values_s / len(traces) * 1e6


async def run(embedder: str, traces: list, batch_size: int) -> dict[str, float]:
    keys_us, values_us = attribute_floor_us(traces)
    started = time.perf_counter()
    for trace in traces:
        summarize(read_span_views(trace.trace_id, list(trace.spans())))
    summary_s = time.perf_counter() - started
    started = time.perf_counter()
    for trace in traces:
        build_agent_trace(trace.trace_id, list(trace.spans()), trace.session_id)
    full_s = time.perf_counter() - started
    figures = {
        "summary_ms": summary_s / len(traces) * 1e3,
        "full_ms": full_s / len(traces) * 1e3,
        "keys_ms": keys_us / 1e3,
        "values_ms": values_us / 1e3,
    }
    for size in sorted({1, batch_size}):
        # A fresh processor (and embedding cache) per pass: every text is a miss in each.
        processor = EmbeddingMetrics(
            "embedding_metrics", EmbeddingMetricsConfig.model_validate({"embedder": {"type": embedder}})
        )
        await processor.start()
        await processor.held.loaded()
        for trace in traces:  # what the scope built before the processors run: not timed
            trace.release_derived()
            agent_summary_of(trace)
        sessions: dict[str, Session] = {}
        ready = ReadyQueue(size)  # the pipeline's batches: one trace per session at a time
        for trace in traces:
            ready.put(trace)
        started = time.perf_counter()
        while len(ready):
            batch = await ready.get_batch()
            items = [(t, sessions.setdefault(t.session_id, Session(t.session_id, Resource(), 0.0))) for t in batch]
            for (trace, session), outputs in zip(items, await processor.process_batch(items)):
                assert not isinstance(outputs, BaseException), outputs
                trace.results = list(outputs)
                session.traces.append(TraceSummary.of(trace))
                ready.release(trace)
            ready.done(batch)
        figures[f"metrics_ms_{size}"] = (time.perf_counter() - started) / len(traces) * 1e3
        await processor.shutdown(time.monotonic() + 10.0)
    localization = FailureLocalization("failure_localization", FailureLocalizationConfig())
    localized = 0
    started = time.perf_counter()
    for trace in traces:
        session = sessions[trace.session_id]
        localized += bool(await localization.process_trace(trace, session))
    figures["localization_ms"] = (time.perf_counter() - started) / len(traces) * 1e3
    figures["localized"] = localized
    session_metrics = SessionMetrics("session_metrics", SessionMetricsConfig())
    started = time.perf_counter()
    for session in sessions.values():
        await session_metrics.process_session(session)
    figures["session_ms"] = (time.perf_counter() - started) / len(sessions) * 1e3
    figures["sessions"] = len(sessions)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--minilm-traces", type=int, default=400)
    parser.add_argument(
        "--batch", type=int, default=DEFAULT_SCORING_BATCH, help="traces per batch (the pipeline's scoring_batch)"
    )
    args = parser.parse_args()
    tune_for_collector()  # garbage collection as `spanscore run` sets it
    embedders = [("static", args.traces), ("hashing", args.traces)]
    if minilm_available() and args.minilm_traces > 0:
        embedders.append(("minilm", args.minilm_traces))
    for embedder, count in embedders:
        figures = asyncio.run(run(embedder, make_traces(count), args.batch))
        print(
            f"{embedder}: {count} traces: agent summary {figures['summary_ms']:.3f} ms/trace "
            f"(full normalized view {figures['full_ms']:.3f}; touching every attribute key "
            f"{figures['keys_ms']:.3f}, keys and values {figures['values_ms']:.3f}); "
            f"coherence + loop_detection, embedding included: "
            f"{figures['metrics_ms_1']:.3f} ms/trace one at a time, "
            f"{figures[f'metrics_ms_{args.batch}']:.3f} in batches of {args.batch}; "
            f"agent_reliability + agent_consistency {figures['session_ms']:.3f} ms/session "
            f"({figures['sessions']} sessions of 4 traces); failure_localization {figures['localization_ms']:.3f} "
            f"ms/trace ({figures['localized']} of {count} failed and localized)"
        )
    if not minilm_available():
        print("minilm: not installed (pip install 'spanscore[minilm]')")


if __name__ == "__main__":
    main()
