"""What reading retrieval steps costs: the normalized view of each convention's RAG trace
(tests/fixtures/spans/rag: a root, a retriever with two documents, a model call), and of
one retriever span holding 10,000 documents or one 10 MB document (bounded to 50
documents of 10,000 characters).

    python bench/retrieval_steps.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spanscore.processors.agent_trace import build_agent_trace  # noqa: E402
from tests.support.agent_fixtures import SPANS_DIR, load_spans  # noqa: E402
from tests.support.agent_spans import TRACE_ID, make_span, with_resource  # noqa: E402


def per_call_ms(run, repeat: int) -> float:
    run()
    started = time.perf_counter()
    for _ in range(repeat):
        run()
    return (time.perf_counter() - started) * 1000 / repeat


def main() -> None:
    for name in ("openinference", "genai", "openllmetry", "langfuse"):
        trace_id, spans = load_spans(name, SPANS_DIR / "rag")
        ms = per_call_ms(lambda t=trace_id, s=spans: build_agent_trace(t, s), 2000)
        print(f"{name:14} 3-span RAG trace: {ms * 1000:7.1f} µs per trace")
    many = {"openinference.span.kind": "RETRIEVER", "input.value": "q"}
    for i in range(10_000):
        many[f"retrieval.documents.{i}.document.id"] = str(i)
        many[f"retrieval.documents.{i}.document.content"] = f"text {i}"
    indexed = with_resource(make_span("retrieve", many))
    print(
        f"10,000 indexed documents:   {per_call_ms(lambda: build_agent_trace(TRACE_ID, indexed), 20):7.1f} ms per span"
    )
    listed = with_resource(
        make_span(
            "retrieval kb",
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.documents": json.dumps(
                    [{"id": str(i), "content": f"text {i}"} for i in range(10_000)]
                ),
            },
        )
    )
    print(
        f"10,000 JSON documents:      {per_call_ms(lambda: build_agent_trace(TRACE_ID, listed), 20):7.1f} ms per span"
    )
    big = with_resource(
        make_span(
            "retrieve",
            {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": "x" * 10_000_000},
        )
    )
    print(f"one 10 MB document:         {per_call_ms(lambda: build_agent_trace(TRACE_ID, big), 20):7.1f} ms per span")


if __name__ == "__main__":
    main()
