"""What an agent or chain span's input and output say, under the frameworks' wrappers.

Frameworks record a run's input and output as whatever object they hold: smolagents
the keyword arguments of `agent.run` (`{"task": ..., "stream": false, ...}`), CrewAI a
`CrewOutput` (`{"raw": ..., "tasks_output": [...]}`), LlamaIndex a `ToolOutput`
(`{"raw_output": ..., "tool_name": ...}`) or a Python repr (`StopEvent(result=...)`).
An envelope is recognised by the keys it carries and stands for the value under one of
them. What is neither text, a message list, an envelope nor a mapping with a known text
key is not the user's question or the agent's answer: the reading falls through to the
next span that holds it (see `build`).
"""

from __future__ import annotations

import re
from typing import Any

from spanscore.processors.agent_trace.content import (
    MAPPING,
    last_user_text,
    normalize_messages,
    parse_json,
    unwrap_call_input,
)

# (keys that identify the envelope, the key holding what it stands for); an envelope
# in EXACT_ENVELOPES carries no other key.
EXACT_ENVELOPES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"result"}), "result"),  # Google ADK wraps what a tool returns as {"result": value}
)
ENVELOPES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"task", "stream", "reset"}), "task"),  # smolagents: agent.run(task, ...) arguments
    (frozenset({"raw", "tasks_output"}), "raw"),  # CrewAI CrewOutput
    (frozenset({"raw", "description", "expected_output"}), "raw"),  # CrewAI TaskOutput
    (frozenset({"raw_output", "tool_name"}), "raw_output"),  # LlamaIndex ToolOutput
    (frozenset({"content", "isError"}), "content"),  # MCP CallToolResult
    (frozenset({"type", "data"}), "data"),  # LangChain serialized message
    (frozenset({"content", "tool_call_id"}), "content"),  # a tool message (LangChain ToolMessage)
)
_MAX_DEPTH = 4
_SIGNAL_KEYS = frozenset().union(*(signature for signature, _ in ENVELOPES + EXACT_ENVELOPES))

INPUT_KEYS = ("input", "query", "question", "task", "prompt", "message", "content", "text")
OUTPUT_KEYS = ("output", "answer", "final_output", "response", "result", "content", "text")

# `Name(...)` or `module.Name(...)`, maybe cut short with "...": how Python prints an
# object, not what a person wrote.
_REPR = re.compile(r"[A-Za-z_][\w.]*\((?:.*\)|.*\.\.\.)", re.DOTALL)


def unwrap(value: Any) -> Any:
    """`value` decoded and out of any framework envelope or captured call arguments."""
    for _ in range(_MAX_DEPTH):
        value = parse_json(value)
        if not isinstance(value, MAPPING):
            return value
        if "args" in value or "kwargs" in value:
            arguments = unwrap_call_input(value)
            if arguments is not value:
                value = arguments
                continue
        keys = value.keys()
        if keys.isdisjoint(_SIGNAL_KEYS):  # the usual case: a tool's own arguments or result
            return value
        for signature, take in ENVELOPES:
            if signature <= keys:
                value = value[take]
                break
        else:
            for signature, take in EXACT_ENVELOPES:
                if signature == keys:
                    value = value[take]
                    break
            else:
                return value
    return value


def is_repr(text: str) -> bool:
    return _REPR.fullmatch(text.strip()) is not None


def input_text(value: Any) -> str | None:
    """The user's request in an agent or chain span's input, or None when it holds none."""
    value = unwrap(value)
    if isinstance(value, str):
        return None if not value.strip() or is_repr(value) else value
    if _is_message_list(value):
        return last_user_text(normalize_messages(value))
    if isinstance(value, MAPPING):
        return _text_under(value, INPUT_KEYS, input_text)
    return None


def output_text(value: Any) -> str | None:
    """The answer in an agent or chain span's output, or None when it holds none."""
    value = unwrap(value)
    if isinstance(value, str):
        return None if not value.strip() or is_repr(value) else value
    if _is_message_list(value):
        # A run's output may be its whole conversation (LangGraph's state): the answer
        # is the last assistant message that says something.
        messages = normalize_messages(value, "assistant")
        return next((m.content for m in reversed(messages) if m.role in ("assistant", "model") and m.content), None)
    if isinstance(value, MAPPING):
        return _text_under(value, OUTPUT_KEYS, output_text)
    return None


def _text_under(value: Any, keys: tuple[str, ...], read: Any) -> str | None:
    for key in keys:
        if key in value:
            text = read(value[key])
            if text:
                return text
    return None


def _is_message_list(value: Any) -> bool:
    if isinstance(value, MAPPING):
        return isinstance(value.get("messages"), list) or ("role" in value and "content" in value)
    return isinstance(value, list) and any(
        isinstance(item, MAPPING) and ("role" in item or "type" in item) for item in value
    )
