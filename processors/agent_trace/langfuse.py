"""Langfuse conventions (the Langfuse SDKs v3+ are OpenTelemetry based).

Every span is an observation: `langfuse.observation.type` (span, generation, agent,
tool, chain, retriever, embedding, evaluator, guardrail, event) with
`langfuse.observation.input` / `.output` (JSON text, or plain text for strings) and, on
generations, `langfuse.observation.model.name`. Trace-level values ride on any span:
`langfuse.trace.name`, `langfuse.trace.input` / `.output`, and the session and user as
`langfuse.session.id` / `langfuse.user.id` (the SDKs themselves write the standard
`session.id` / `user.id`). The `@observe` decorator records a function's input as
`{"args": [...], "kwargs": {...}}`; the OpenAI integration records a generation's
input as the message list, or `{"messages": [...], "tools": [...]}` when tools are
offered. A `retriever` observation's input is the query and its output the documents
(LangChain's `Document`s with `page_content` and `metadata`, LlamaIndex nodes, plain
texts, or a mapping holding them under `documents`).
"""

from __future__ import annotations

from spanscore.processors.agent_trace.content import (
    MAPPING,
    normalize_messages,
    parse_json,
    tool_definitions,
    unwrap_call_input,
)
from spanscore.processors.agent_trace.retrieval import documents_of, query_text
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, OTHER, RETRIEVAL, TOOL, SpanView

CONVENTION = "langfuse"
# A span with no key under these is not read at all.
KEY_PREFIXES = ("langfuse.",)

_ROLE_BY_TYPE = {
    "generation": LLM,
    "tool": TOOL,
    "agent": AGENT,
    "chain": CHAIN,
    "span": CHAIN,
    "retriever": RETRIEVAL,
}


def apply(view: SpanView) -> bool:
    attrs = view.attrs
    if not attrs.has_prefix("langfuse."):
        return False
    view.conventions.add(CONVENTION)
    kind = attrs.text("langfuse.observation.type")
    role = _ROLE_BY_TYPE.get((kind or "").lower(), OTHER if kind else None)
    view.fill("role", role)
    view.fill("trace_name", attrs.text("langfuse.trace.name"))
    view.fill("trace_input", attrs.get("langfuse.trace.input"))
    view.fill("trace_output", attrs.get("langfuse.trace.output"))
    view.fill("user_id", attrs.text("langfuse.user.id"))
    view.fill("model", attrs.text("langfuse.observation.model.name"))
    if attrs.text("langfuse.observation.level") == "ERROR":
        view.fill("error", attrs.text("langfuse.observation.status_message") or "error")

    observed_input = attrs.get("langfuse.observation.input")
    observed_output = attrs.get("langfuse.observation.output")
    if role == LLM:
        parsed = parse_json(observed_input)
        if isinstance(parsed, MAPPING):
            view.add_tools(tool_definitions(parsed.get("tools") or parsed.get("functions")))
        view.fill("input_messages", normalize_messages(parsed))
        view.fill("output_messages", normalize_messages(observed_output, "assistant"))
    elif role == TOOL:
        view.fill("tool_name", view.name)
        view.fill("tool_arguments", unwrap_call_input(observed_input))
        view.fill("tool_result", observed_output)
    elif role == AGENT:
        view.fill("agent_name", view.name)
        view.fill("input", observed_input)
        view.fill("output", observed_output)
    elif role == CHAIN:
        view.fill("input", observed_input)
        view.fill("output", observed_output)
    elif role == RETRIEVAL:
        view.fill("retrieval_query", query_text(observed_input))
        if not view.documents:
            view.documents, view.document_count = documents_of(observed_output)
    return True
