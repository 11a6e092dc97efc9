"""The Vercel AI SDK's own `ai.*` attributes (AI SDK 4 to 6, and 7's LegacyOpenTelemetry).

`ai.operationId` says what a span is: `ai.generateText` / `ai.streamText` (and the
object variants) is the agent run, with the request in `ai.prompt` (JSON `{system,
messages}` or `{system, prompt}`) and the answer in `ai.response.text`; a
`.doGenerate` / `.doStream` child is one model call, with `ai.prompt.messages`,
`ai.response.text`, `ai.response.toolCalls` and the offered `ai.prompt.tools`;
`ai.toolCall` is one tool execution (`ai.toolCall.name`, `.id`, `.args` or `.input`,
`.result` or `.output`). The run's name is `ai.telemetry.functionId`. AI SDK 7's default
telemetry emits the GenAI conventions instead, read by `genai`.
"""

from __future__ import annotations

from typing import Any

from spanscore.processors.agent_trace.content import normalize_messages, parse_json, tool_definitions
from spanscore.processors.agent_trace.model import Message, ToolCall
from spanscore.processors.agent_trace.spans import AGENT, LLM, OTHER, TOOL, SpanView

CONVENTION = "vercel_ai"
KEY_PREFIXES = ("ai.",)

_RUNS = ("ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject")
_CALL_EVIDENCE = ("ai.usage.", "ai.response.finishReason")


def apply(view: SpanView) -> bool:
    attrs = view.attrs
    operation = attrs.text("ai.operationId")
    if not operation:
        return False
    view.conventions.add(CONVENTION)
    role = _role(operation)
    view.fill("role", role)
    view.fill("agent_name", attrs.text("ai.telemetry.functionId"))
    view.fill("model", attrs.text("ai.response.model", "ai.model.id"))
    if role == AGENT:
        prompt = parse_json(attrs.get("ai.prompt"))
        view.fill("input", prompt)
        if isinstance(prompt, dict) and isinstance(prompt.get("system"), str):
            view.fill("system_prompt", prompt["system"])
        view.fill("output", attrs.text("ai.response.text"))
    elif role == LLM:
        if attrs.has_prefix(_CALL_EVIDENCE):
            view.called = True
        view.fill("input_messages", normalize_messages(attrs.get("ai.prompt.messages")))
        view.fill("output_messages", _response(attrs.text("ai.response.text"), attrs.get("ai.response.toolCalls")))
        view.add_tools(tool_definitions(attrs.get("ai.prompt.tools")))
    elif role == TOOL:
        view.fill("tool_name", attrs.text("ai.toolCall.name"))
        view.fill("tool_call_id", attrs.text("ai.toolCall.id"))
        view.fill("tool_arguments", attrs.get("ai.toolCall.args") or attrs.get("ai.toolCall.input"))
        view.fill("tool_result", attrs.get("ai.toolCall.result") or attrs.get("ai.toolCall.output"))
    return True


def _role(operation: str) -> str:
    if operation == "ai.toolCall":
        return TOOL
    if operation.endswith((".doGenerate", ".doStream")):
        return LLM
    if operation in _RUNS:
        return AGENT
    return OTHER


def _response(text: str | None, tool_calls: Any) -> list[Message]:
    calls = parse_json(tool_calls)
    found = [
        ToolCall(
            id=call.get("toolCallId"), name=call["toolName"], arguments=parse_json(call.get("input", call.get("args")))
        )
        for call in (calls if isinstance(calls, list) else [])
        if isinstance(call, dict) and isinstance(call.get("toolName"), str)
    ]
    if not text and not found:
        return []
    return [Message(role="assistant", content=text or "", tool_calls=found)]
