"""OpenTelemetry GenAI semantic conventions, current and legacy.

Current (semconv 1.37+): `gen_ai.operation.name` says what a span is; content is in
`gen_ai.input.messages` / `gen_ai.output.messages` (the `parts` model),
`gen_ai.system_instructions` and `gen_ai.tool.definitions`; tool spans carry
`gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments` and
`gen_ai.tool.call.result`; agent spans `gen_ai.agent.name`; retrieval spans
(`gen_ai.operation.name` `retrieval`) `gen_ai.retrieval.query.text` and
`gen_ai.retrieval.documents` (a JSON list of documents, each with `id` and `score` and
any further fields, the text usually in `content`).

Legacy: indexed `gen_ai.prompt.N.*` / `gen_ai.completion.N.*` attributes (OpenLLMetry
before it moved to the current model), whole-list `gen_ai.prompt` / `gen_ai.completion`
values, and per-message events (`gen_ai.user.message`, `gen_ai.choice`, ...) when a
producer records them as span events. The Python openai-v2 instrumentation emitted
those events as log records, which never reach a trace pipeline; the span-event form
is what other SDKs (Azure AI Inference, Semantic Kernel, Strands) produce, with the
message in `gen_ai.event.content` or in plain `content`/`role`/`tool_calls`/`message`
attributes; on a tool span (Strands), `gen_ai.tool.message` holds the arguments and
`gen_ai.choice` the result.

Content of the current convention may also arrive as a span event
`gen_ai.client.inference.operation.details` whose attributes are the content keys
(`gen_ai.input.messages`, ...), the form the conventions define for content recorded as
an event and that Strands emits with `gen_ai_latest_experimental`; it is read as if the
keys were the span's own.
"""

from __future__ import annotations

from typing import Any

from spanscore.core.attributes import attributes_to_dict, find_attribute
from spanscore.processors.agent_trace.attributes import KeyShape
from spanscore.processors.agent_trace.content import (
    content_text,
    normalize_message,
    normalize_messages,
    parse_json,
    tool_definitions,
)
from spanscore.processors.agent_trace.model import Message
from spanscore.processors.agent_trace.retrieval import documents_of, query_text
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, OTHER, RETRIEVAL, TOOL, SpanView

CONVENTION = "genai"
LEGACY_CONVENTION = "genai_legacy"

_ROLE_BY_OPERATION = {
    "chat": LLM,
    "text_completion": LLM,
    "completion": LLM,
    "generate_content": LLM,
    "responses": LLM,
    "execute_tool": TOOL,
    "invoke_agent": AGENT,
    "create_agent": AGENT,
    "invoke_workflow": CHAIN,
    "workflow": CHAIN,
    "embeddings": OTHER,
    "retrieval": RETRIEVAL,
}

_LEGACY_PREFIXES = ("gen_ai.prompt", "gen_ai.completion")
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_CALL_EVIDENCE = ("gen_ai.usage.", "gen_ai.response.")

_INPUT_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


class _Keys:
    """Which of the keys `apply` reads a key shape has: decided once per shape."""

    __slots__ = (
        "any",
        "legacy",
        "current",
        "operation",
        "input_messages",
        "output_messages",
        "messages",
        "tool_arguments",
        "tool_result",
        "agent_name",
        "call_evidence",
        "model",
        "system_instructions",
        "tool_definitions",
        "tool_name",
        "tool_call_id",
        "tool_description",
        "retrieval",
    )

    def __init__(self, shape: KeyShape):
        keys = shape.positions
        count = len(shape.under("gen_ai."))
        legacy = len(shape.under(_LEGACY_PREFIXES)) if count else 0
        self.any = count > 0
        self.legacy = legacy > 0
        self.current = count > legacy  # a key of the current convention
        self.operation = "gen_ai.operation.name" in keys
        self.input_messages = "gen_ai.input.messages" in keys
        self.output_messages = "gen_ai.output.messages" in keys
        self.messages = self.input_messages or self.output_messages
        self.tool_arguments = "gen_ai.tool.call.arguments" in keys
        self.tool_result = "gen_ai.tool.call.result" in keys
        self.agent_name = "gen_ai.agent.name" in keys
        self.call_evidence = bool(shape.under(_CALL_EVIDENCE))
        self.model = "gen_ai.response.model" in keys or "gen_ai.request.model" in keys
        self.system_instructions = "gen_ai.system_instructions" in keys
        self.tool_definitions = "gen_ai.tool.definitions" in keys
        self.tool_name = "gen_ai.tool.name" in keys
        self.tool_call_id = "gen_ai.tool.call.id" in keys
        self.tool_description = "gen_ai.tool.description" in keys
        self.retrieval = "gen_ai.retrieval.query.text" in keys or "gen_ai.retrieval.documents" in keys


def apply(view: SpanView) -> bool:
    """Fill `view` from GenAI attributes; True when the span uses the convention."""
    attrs = view.attrs
    keys: _Keys = attrs.shape_fact(_Keys)
    events = view.span.events
    has_events = bool(events) and any(event.name.startswith("gen_ai.") for event in events)
    if not keys.any and not has_events:
        return False
    if keys.current:
        view.conventions.add(CONVENTION)
    text, get, fill = attrs.text, attrs.get, view.fill
    # Only keys the shape has are read: most spans carry a few of them.
    operation = text("gen_ai.operation.name") if keys.operation else None
    if operation:
        role = _ROLE_BY_OPERATION.get(operation, OTHER)
    elif keys.messages:
        role = LLM
    elif keys.tool_arguments:
        role = TOOL
    else:
        role = None
    fill("role", role)

    if keys.agent_name:
        fill("agent_name", text("gen_ai.agent.name"))
    if keys.call_evidence and view.role == LLM:
        view.called = True
    if keys.model:
        fill("model", text("gen_ai.response.model", "gen_ai.request.model"))
    if keys.input_messages:
        fill("input_messages", normalize_messages(get("gen_ai.input.messages")))
    if keys.output_messages:
        fill("output_messages", normalize_messages(get("gen_ai.output.messages"), "assistant"))
    if keys.system_instructions:
        fill("system_prompt", _system_instructions(get("gen_ai.system_instructions")))
    if keys.tool_definitions:
        view.add_tools(tool_definitions(get("gen_ai.tool.definitions")))
    if has_events:
        _apply_detail_events(view)
    if (has_events or keys.legacy) and view.role != TOOL:
        _apply_legacy(view)

    if view.role == TOOL or keys.tool_arguments or keys.tool_result:
        if keys.tool_name:
            fill("tool_name", text("gen_ai.tool.name"))
        if keys.tool_call_id:
            fill("tool_call_id", text("gen_ai.tool.call.id"))
        if keys.tool_arguments:
            fill("tool_arguments", get("gen_ai.tool.call.arguments"))
        if keys.tool_result:
            fill("tool_result", get("gen_ai.tool.call.result"))
        if keys.tool_description:
            fill("tool_description", text("gen_ai.tool.description"))
        if has_events:
            _apply_tool_events(view)
    elif keys.retrieval and view.role == RETRIEVAL:
        fill("retrieval_query", query_text(get("gen_ai.retrieval.query.text")))
        if not view.documents:
            view.documents, view.document_count = documents_of(get("gen_ai.retrieval.documents"))
    return True


def _apply_detail_events(view: SpanView) -> None:
    for event in view.span.events:
        if event.name != DETAILS_EVENT:
            continue
        values = attributes_to_dict(event.attributes)
        if "gen_ai.input.messages" in values:
            view.fill("input_messages", normalize_messages(values["gen_ai.input.messages"]))
        if "gen_ai.output.messages" in values:
            view.fill("output_messages", normalize_messages(values["gen_ai.output.messages"], "assistant"))
        if "gen_ai.system_instructions" in values:
            view.fill("system_prompt", _system_instructions(values["gen_ai.system_instructions"]))
        if "gen_ai.tool.definitions" in values:
            view.add_tools(tool_definitions(values["gen_ai.tool.definitions"]))
        if view.role is None and ("gen_ai.input.messages" in values or "gen_ai.output.messages" in values):
            view.fill("role", LLM)


def _apply_tool_events(view: SpanView) -> None:
    """Strands' legacy tool span: arguments in `gen_ai.tool.message`, result in `gen_ai.choice`."""
    for event in view.span.events:
        values = attributes_to_dict(event.attributes)
        if event.name == "gen_ai.tool.message":
            view.fill("tool_arguments", values.get("content"))
            view.fill("tool_call_id", values.get("id"))
        elif event.name == "gen_ai.choice":
            view.fill("tool_result", values.get("message"))


def _system_instructions(value: Any) -> str | None:
    value = parse_json(value)
    if value is None:
        return None
    text = content_text(value)
    return text or None


def _apply_legacy(view: SpanView) -> bool:
    attrs = view.attrs
    found = False
    prompt = attrs.nested("gen_ai.prompt.")
    if prompt is None and "gen_ai.prompt" in attrs:
        prompt = attrs.get("gen_ai.prompt")
    completion = attrs.nested("gen_ai.completion.")
    if completion is None and "gen_ai.completion" in attrs:
        completion = attrs.get("gen_ai.completion")
    if prompt is not None:
        found = True
        view.fill("input_messages", normalize_messages(prompt))
    if completion is not None:
        found = True
        view.fill("output_messages", normalize_messages(completion, "assistant"))

    inputs, outputs = _event_messages(view)
    if inputs or outputs:
        found = True
        view.fill("input_messages", inputs)
        view.fill("output_messages", outputs)
    if found:
        view.conventions.add(LEGACY_CONVENTION)
        view.fill("role", LLM)
    return found


def _event_messages(view: SpanView) -> tuple[list[Message], list[Message]]:
    inputs: list[Message] = []
    outputs: list[Message] = []
    for event in view.span.events:
        name = event.name
        if name in _INPUT_EVENT_ROLES:
            message = normalize_message(_event_body(event.attributes), _INPUT_EVENT_ROLES[name])
            if message is not None:
                message.role = _INPUT_EVENT_ROLES[name]
                inputs.append(message)
        elif name == "gen_ai.choice":
            message = normalize_message(_event_body(event.attributes), "assistant")
            if message is not None:
                outputs.append(message)
        elif name == "gen_ai.content.prompt":
            inputs.extend(normalize_messages(find_attribute(event.attributes, "gen_ai.prompt")))
        elif name == "gen_ai.content.completion":
            outputs.extend(normalize_messages(find_attribute(event.attributes, "gen_ai.completion"), "assistant"))
    return inputs, outputs


def _event_body(attributes: Any) -> Any:
    values = attributes_to_dict(attributes)
    body = parse_json(values.get("gen_ai.event.content"))
    if isinstance(body, dict):
        return body
    body = {k: v for k, v in values.items() if not k.startswith("gen_ai.system")}
    if "message" in body:
        message = parse_json(body.pop("message"))
        if isinstance(message, (str, list)) and "content" not in body:
            body["content"] = message  # Strands: the text, or content blocks
        else:
            body["message"] = message
    if "tool_calls" in body:
        body["tool_calls"] = parse_json(body["tool_calls"])
    return body
