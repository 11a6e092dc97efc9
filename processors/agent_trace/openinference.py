"""OpenInference (Arize Phoenix) conventions.

`openinference.span.kind` names the span (LLM, TOOL, AGENT, CHAIN, ...). Agent and
chain spans carry `input.value` / `output.value`; a TOOL span's `input.value` is the
arguments and `output.value` the result, next to `tool.name`, `tool.description` and
`tool.parameters`. LLM spans flatten messages into indexed keys
(`llm.input_messages.N.message.role`, `...message.tool_calls.M.tool_call.function.name`)
and offered tools into `llm.tools.N.tool.json_schema`. The OpenAI Agents SDK
instrumentation puts the agent's name in `agent.name`, agent-graph instrumentations
(CrewAI) in `graph.node.id`. CrewAI's crew span lists its tasks in `crew_tasks`: their
descriptions are what the crew was asked.

RETRIEVER spans (LangChain's and LlamaIndex's retrievers among them) carry the query in
`input.value` and the documents as `retrieval.documents.N.document.id/content/score/
metadata`; RERANKER spans `reranker.query`, `reranker.model_name`, `reranker.top_k` and
the documents in and out as `reranker.input_documents.N.document.*` /
`reranker.output_documents.N.document.*` (a reranker's step holds what it returned).
"""

from __future__ import annotations

from typing import Any

from spanscore.processors.agent_trace.content import (
    MAPPING,
    normalize_message,
    normalize_messages,
    parse_json,
    tool_definitions,
)
from spanscore.processors.agent_trace.envelopes import is_repr
from spanscore.processors.agent_trace.model import Message
from spanscore.processors.agent_trace.retrieval import flattened_documents, query_text
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, OTHER, RETRIEVAL, TOOL, SpanView

CONVENTION = "openinference"
# A span with no key under these is not read at all.
KEY_PREFIXES = ("openinference.", "llm.")

_ROLE_BY_KIND = {
    "LLM": LLM,
    "TOOL": TOOL,
    "AGENT": AGENT,
    "CHAIN": CHAIN,
    "RETRIEVER": RETRIEVAL,
    "RERANKER": RETRIEVAL,
}
_CALL_EVIDENCE = ("llm.token_count.", "llm.finish_reason")


def apply(view: SpanView) -> bool:
    attrs = view.attrs
    if not attrs.has_prefix(KEY_PREFIXES):  # no kind, no flattened messages
        return False
    kind = attrs.text("openinference.span.kind")
    flattened = attrs.has_prefix("llm.input_messages.") or attrs.has_prefix("llm.output_messages.")
    if kind is None and not flattened:
        return False
    view.conventions.add(CONVENTION)
    role = _ROLE_BY_KIND.get((kind or "").upper(), OTHER if kind else LLM)
    view.fill("role", role)
    view.fill("agent_name", attrs.text("agent.name"))
    if role == AGENT:
        view.fill("agent_name", attrs.text("graph.node.id"))
    view.fill("model", attrs.text("llm.model_name"))
    if role == LLM and attrs.has_prefix(_CALL_EVIDENCE):
        view.called = True
    view.add_tools(tool_definitions(attrs.nested("llm.tools.")))

    if role == LLM:
        inputs = normalize_messages(attrs.nested("llm.input_messages."))
        if not inputs:
            inputs = _said(normalize_messages(attrs.get("input.value")))
        view.fill("input_messages", inputs)
        outputs = normalize_messages(attrs.nested("llm.output_messages."), "assistant")
        if not outputs:
            outputs = _said(_response_messages(attrs.get("output.value")))
        view.fill("output_messages", outputs)
    elif role == TOOL:
        view.fill("tool_name", attrs.text("tool.name"))
        view.fill("tool_call_id", attrs.text("tool_call.id", "tool.id"))
        view.fill("tool_arguments", attrs.get("input.value"))
        view.fill("tool_result", attrs.get("output.value"))
        view.fill("tool_description", attrs.text("tool.description"))
        view.fill("tool_parameters", attrs.get("tool.parameters"))
    elif role == RETRIEVAL:
        _apply_retrieval(view, reranker=(kind or "").upper() == "RERANKER")
    else:
        view.fill("input", attrs.get("input.value"))
        if "crew_tasks" in attrs:
            view.fill("input", _task_descriptions(attrs.get("crew_tasks")))
        view.fill("output", attrs.get("output.value"))
    return True


def _apply_retrieval(view: SpanView, reranker: bool) -> None:
    attrs = view.attrs
    if reranker:
        view.fill("retrieval_query", query_text(attrs.get("reranker.query")))
        view.fill("model", attrs.text("reranker.model_name"))
        documents, count = flattened_documents(attrs, "reranker.output_documents.")
    else:
        documents, count = flattened_documents(attrs, "retrieval.documents.")
    view.fill("retrieval_query", query_text(attrs.get("input.value")))
    if documents and not view.documents:
        view.documents, view.document_count = documents, count


def _task_descriptions(value: Any) -> str | None:
    tasks = parse_json(value)
    if not isinstance(tasks, list):
        return None
    texts = [t["description"] for t in tasks if isinstance(t, MAPPING) and isinstance(t.get("description"), str)]
    return "\n".join(texts) or None


def _said(messages: list[Message]) -> list[Message]:
    """`input.value`/`output.value` read as messages, when they are messages: a framework's
    own objects (LlamaIndex's `ChatMessage(...)` reprs, request arguments) say nothing."""
    if any(m.tool_calls or (m.content and not is_repr(m.content)) for m in messages):
        return messages
    return []


def _response_messages(value: Any) -> list[Message]:
    """Assistant messages out of a raw chat-completions or Responses API response body."""
    value = parse_json(value)
    if isinstance(value, MAPPING):
        if isinstance(value.get("choices"), list):
            messages = []
            for choice in value["choices"]:
                if isinstance(choice, MAPPING):
                    message = normalize_message(choice.get("message"), "assistant")
                    if message is not None:
                        messages.append(message)
            return messages
        if isinstance(value.get("output"), list):
            return _merge_assistant(normalize_messages(value["output"], "assistant"))
    return normalize_messages(value, "assistant")


def _merge_assistant(messages: list[Message]) -> list[Message]:
    """Responses API output items (reasoning, message, function calls) as one turn."""
    if not messages:
        return []
    merged = Message(role="assistant")
    for message in messages:
        merged.content += message.content
        merged.tool_calls.extend(message.tool_calls)
        merged.reasoning.extend(message.reasoning)
    return [merged]
