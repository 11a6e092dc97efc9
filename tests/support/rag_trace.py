"""A retrieval-augmented run as OpenInference records it, for rag_metrics' tests: a
question, a retrieval of two documents, the model's answer, and a retrieval that ended
after the model call started (so it is not that call's context)."""

from __future__ import annotations

from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from tests.support.agent_spans import make_span

QUESTION = "How long can I return items?"
D_RETURNS = "Items can be returned within 30 days."
D_SHIPPING = "Shipping takes 5 days."
S_RETURNS = "Returns are accepted for 30 days."
S_SHIPPING = "Shipping is fast."
ANSWER = f"{S_RETURNS} {S_SHIPPING}"
LATER_QUERY, LATER_DOCUMENT = "Where is the store?", "The store is in Oslo."
CHAIN, RETRIEVER, LLM, TOOL = "CHAIN", "RETRIEVER", "LLM", "TOOL"


def kind(name: str, **attributes) -> dict:
    return {"openinference.span.kind": name, **attributes}


def documents(*texts: str) -> dict:
    return {f"retrieval.documents.{i}.document.content": text for i, text in enumerate(texts)}


def answer(text: str) -> dict:
    return {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": QUESTION,
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": text,
    }


def rag_spans(trace_id: bytes = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")):
    root = make_span(
        "qa", kind(CHAIN, **{"input.value": QUESTION, "output.value": ANSWER}), start=0, end=1_000, trace_id=trace_id
    )
    first = make_span(
        "retrieve",
        kind(RETRIEVER, **{"input.value": QUESTION}, **documents(D_RETURNS, D_SHIPPING)),
        parent=root,
        start=10,
        end=60,
        trace_id=trace_id,
    )
    model = make_span("chat", kind(LLM, **answer(ANSWER)), parent=root, start=70, end=880, trace_id=trace_id)
    # Ends after the model call started: not its context.
    later = make_span(
        "retrieve_more",
        kind(RETRIEVER, **{"input.value": LATER_QUERY}, **documents(LATER_DOCUMENT)),
        parent=root,
        start=65,
        end=900,
        trace_id=trace_id,
    )
    return root, first, model, later


def traces_of(*requests):
    assembler = Assembler(PipelineSettings())
    for request in requests:
        assembler.add(request, now=0.0)
    return sorted(assembler.pop_all(), key=lambda trace: trace.start_time_unix_nano)
