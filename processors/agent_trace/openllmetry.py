"""OpenLLMetry (Traceloop) conventions.

Spans made by Traceloop's decorators carry `traceloop.span.kind` (workflow, task, agent,
tool), `traceloop.entity.name` and the decorated function's input and output in
`traceloop.entity.input` / `traceloop.entity.output`, the input recorded as
`{"args": [...], "kwargs": {...}}`. Association properties
(`traceloop.association.properties.*`) hold the session and user ids. LLM spans of
current versions use the GenAI attributes (read by `genai`); older versions listed
offered functions as `llm.request.functions.N.name/description/parameters` and typed
the span with `llm.request.type`.
"""

from __future__ import annotations

from spanscore.processors.agent_trace.content import tool_definitions, unwrap_call_input
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, TOOL, SpanView

CONVENTION = "openllmetry"

# A span with no key under these is not read at all.
KEY_PREFIXES = ("traceloop.", "llm.")

_ROLE_BY_KIND = {"workflow": CHAIN, "task": CHAIN, "agent": AGENT, "tool": TOOL}
_LLM_REQUEST_TYPES = {"chat", "completion", "rerank"}


def apply(view: SpanView) -> bool:
    attrs = view.attrs
    if not attrs.has_prefix(KEY_PREFIXES):  # none of the keys read below
        return False
    kind = attrs.text("traceloop.span.kind")
    request_type = attrs.text("llm.request.type")
    functions = attrs.nested("llm.request.functions.")
    if kind is None and request_type is None and functions is None and not attrs.has_prefix("traceloop."):
        return False
    view.conventions.add(CONVENTION)
    role = _ROLE_BY_KIND.get((kind or "").lower())
    if role is None and request_type in _LLM_REQUEST_TYPES:
        role = LLM
    view.fill("role", role)
    view.add_tools(tool_definitions(functions))
    view.fill("user_id", attrs.text("traceloop.association.properties.user_id"))

    name = attrs.text("traceloop.entity.name")
    if role == TOOL:
        view.fill("tool_name", name)
        view.fill("tool_arguments", unwrap_call_input(attrs.get("traceloop.entity.input")))
        view.fill("tool_result", attrs.get("traceloop.entity.output"))
    elif role in (AGENT, CHAIN):
        if role == AGENT:
            view.fill("agent_name", name)
        view.fill("input", attrs.get("traceloop.entity.input"))
        view.fill("output", attrs.get("traceloop.entity.output"))
    return True
