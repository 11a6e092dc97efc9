"""Cost of writing span-level results, in microseconds per scored span.

    python bench/span_scores.py [--rounds 7] [--spans 20] [--attributes 15]

A trace of an agent root and `--spans` model-call spans (GenAI attributes, `--attributes`
each, none under `eval.`), one span-level metric scoring every model call (score, label,
explanation; span events on), a trace-level metric beside it. Each row is the trace's
cost with the span-level results less its cost with the trace-level result alone, per
span scored:
- sorted: `Scored.sort_spans`, the span-level results checked against the trace's span
  ids and rolled up on the root;
- worker fields: `ScoreWriter.prepare_trace`, the bytes a scoring worker (or the
  collector, for a trace scored in its process) prepares for each span;
- merged: those bytes merged onto the spans, as the attach stage does;
- in place, scored before: `write_in_place` on a trace that carries an earlier scoring
  of the metric (a replayed file, a chained collector): every span's earlier results
  removed, the new ones written;
- observed: the score metrics' observations with each span's kind (the spans' views
  built beforehand, as the processor that chose the spans built them).
Each trace is a fresh copy made before the clock starts. A figure is the best batch of
20 traces over `--rounds` rounds of ~0.3 s each, which filters out scheduler noise on
a shared machine.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans  # noqa: E402

from bench.attach_scores import best_us  # noqa: E402
from spanscore.core.provenance import Provenance  # noqa: E402
from spanscore.core.result import MetricResult  # noqa: E402
from spanscore.core.trace import ScopeOrigin, Trace  # noqa: E402
from spanscore.exporters.score_observations import ScoreObservations  # noqa: E402
from spanscore.pipeline.score_writer import ScoreWriter  # noqa: E402
from spanscore.pipeline.scoring import Scored  # noqa: E402
from spanscore.processors.agent_trace import span_views_of  # noqa: E402

TRACE_ID = b"\x01" * 16


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def agent_run(spans: int, attributes: int) -> ResourceSpans:
    resource_spans = ResourceSpans(resource=Resource(attributes=[_kv("service.name", "support-bot")]))
    scope = resource_spans.scope_spans.add()
    root = scope.spans.add(trace_id=TRACE_ID, span_id=(1).to_bytes(8, "big"), name="invoke_agent support-bot")
    root.attributes.append(_kv("gen_ai.operation.name", "invoke_agent"))
    for i in range(spans):
        span = scope.spans.add(
            trace_id=TRACE_ID, span_id=(i + 2).to_bytes(8, "big"), parent_span_id=root.span_id, name="chat m"
        )
        span.attributes.extend([_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "m")])
        span.attributes.extend(_kv(f"app.attribute_{j}", "value " * 4) for j in range(attributes - 2))
    return resource_spans


def trace_of(resource_spans: ResourceSpans) -> Trace:
    copy = ResourceSpans()
    copy.CopyFrom(resource_spans)
    trace = Trace(TRACE_ID, 0.0)
    origin = ScopeOrigin(copy, copy.scope_spans[0])
    for position, span in enumerate(origin.scope_spans.spans):
        trace.add(position, span, origin)
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--spans", type=int, default=20)
    parser.add_argument("--attributes", type=int, default=15)
    args = parser.parse_args()
    if min(args.rounds, args.spans) < 1 or args.attributes < 2:
        parser.error("--rounds and --spans must be at least 1, --attributes at least 2")
    template = agent_run(args.spans, args.attributes)
    span_ids = [span.span_id.hex() for span in template.scope_spans[0].spans[1:]]
    provenance = {name: Provenance("gpt-4.1-mini", "0123456789ab") for name in ("faithfulness", "coherence")}
    writer = ScoreWriter(provenance)
    trace_level = MetricResult(name="coherence", score=0.8, explanation="coherence explained in a sentence.")

    def scored(with_spans: bool) -> Scored:
        results = [trace_level]
        if with_spans:
            results += [
                MetricResult(name="faithfulness", score=0.75, explanation="2 of 3 claims supported.", span_id=span_id)
                for span_id in span_ids
            ]
        return Scored(results=list(results))

    def sorted_for(trace: Trace, with_spans: bool) -> Scored:
        one = scored(with_spans)
        one.sort_spans(trace)
        return one

    def fresh(with_spans: bool) -> Callable[[], tuple[Trace, Scored]]:
        def make() -> tuple[Trace, Scored]:
            trace = trace_of(template)
            return trace, sorted_for(trace, with_spans)

        return make

    scored_before = trace_of(template)
    writer.write_in_place(scored_before, sorted_for(scored_before, True))
    before = ResourceSpans()
    before.CopyFrom(scored_before.root_origin.resource_spans)

    def rescoring(with_spans: bool) -> Callable[[], tuple[Trace, Scored]]:
        def make() -> tuple[Trace, Scored]:
            trace = trace_of(before)
            return trace, sorted_for(trace, with_spans)

        return make

    def unsorted(with_spans: bool) -> Callable[[], tuple[Trace, Scored]]:
        return lambda: (trace_of(template), scored(with_spans))

    def sort(made) -> None:
        trace, one = made
        one.sort_spans(trace)

    def prepare(made) -> None:
        trace, one = made
        writer.prepare_trace(trace, one)

    def merge(made) -> None:
        trace, one = made
        prepared = writer.prepare_trace(trace, one)
        spans = {span.span_id: span for span, _ in trace.spans()}
        spans[prepared.anchor_span_id].MergeFromString(prepared.anchor)
        for span_id, fields in prepared.span_fields:
            spans[span_id].MergeFromString(fields)

    def in_place(made) -> None:
        trace, one = made
        writer.write_in_place(trace, one)

    def viewed(with_spans: bool) -> Callable[[], tuple[Trace, Scored]]:
        def make() -> tuple[Trace, Scored]:
            trace, one = fresh(with_spans)()
            span_views_of(trace)
            return trace, one

        return make

    def observe(made) -> None:
        trace, one = made
        writer.observe_trace(ScoreObservations(), trace, one)

    rows = [
        ("sorted", unsorted, sort),
        ("worker fields", fresh, prepare),
        ("merged", fresh, merge),
        ("in place, scored before", rescoring, in_place),
        ("observed", viewed, observe),
    ]
    print(
        f"{args.spans} model-call spans of {args.attributes} attributes, each scored; "
        f"best of {args.rounds} rounds; us per trace without and with the span-level results, and per span"
    )
    for label, make, run in rows:
        without = best_us(make(False), run, args.rounds)
        with_spans = best_us(make(True), run, args.rounds)
        per_span = (with_spans - without) / args.spans
        print(f"{label:<26}{without:>9.1f}{with_spans:>10.1f} us {per_span:>7.2f} us/span")


if __name__ == "__main__":
    main()
