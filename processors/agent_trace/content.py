"""Turning attribute values into messages and text, whatever shape they arrived in.

Instrumentations disagree on how content is carried: JSON held in a string attribute,
structured OTLP arrays/kvlists, attributes flattened into indexed keys
(`llm.input_messages.0.message.role`), OpenAI chat messages, Responses API items, or
the OTel GenAI `parts` model. Everything here is total: odd input yields empty or
partial results, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from json.scanner import make_scanner
from typing import Any, TypeVar

from spanscore.processors.agent_trace.model import Message, ToolCall, ToolDefinition, new_message

# What isinstance checks take as a mapping: dict first, the common case, answered without
# the (slower) abstract-class check.
MAPPING = (dict, Mapping)

# Roles frameworks name their own way: smolagents' tool-call turns and tool results,
# LangChain's message types.
ROLE_ALIASES = {"tool-call": "assistant", "tool-response": "tool", "human": "user", "ai": "assistant"}
_LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool"})
_BEDROCK_BLOCKS = frozenset({"toolUse", "toolResult"})
_SDK_TOOL_PARTS = frozenset({"tool-call", "tool-result"})

# json.loads and json.dumps with non-default options go through several Python-level
# calls (and a new encoder) per value; these are what they end up calling.
# typeshed types the C scanner's argument as a scanner, not the decoder it reads its options from.
_scan_json = make_scanner(json.JSONDecoder())  # pyright: ignore[reportArgumentType]
_encoder = json.JSONEncoder(ensure_ascii=False, sort_keys=False, default=str)

_T = TypeVar("_T")


def parse_json(value: Any) -> Any:
    """The decoded value when `value` is a string holding a JSON object, array or string."""
    if not isinstance(value, str):
        if not isinstance(value, bytes):
            return value
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    stripped = value.strip()
    if not stripped or stripped[0] not in '{["':
        return value
    try:
        parsed, end = _scan_json(stripped, 0)
    except (ValueError, StopIteration, RecursionError):
        return value
    # `stripped` has no trailing whitespace, so anything left after the value is
    # extra data, which json.loads refuses too.
    return parsed if end == len(stripped) else value


def to_text(value: Any) -> str | None:
    """A human-readable string for a value: strings as they are, structures as JSON."""
    value = parse_json(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    try:
        return _encoder.encode(value)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def block_text(value: Any) -> str | None:
    """Text of a value that may be content blocks (`[{"text": ...}]`, Strands' and Bedrock's
    tool results), else the value as text."""
    value = parse_json(value)
    if isinstance(value, list) and value and all(isinstance(part, MAPPING) and "text" in part for part in value):
        return content_text(value)
    return to_text(value)


def parse_arguments(value: Any) -> dict[str, Any] | str | None:
    """Tool-call arguments as a dict when they are a JSON object, else the raw text."""
    parsed = parse_json(value)
    if isinstance(parsed, dict):
        return parsed
    if parsed is None:
        return None
    return to_text(parsed)


def unflatten(flat: Mapping[str, Any]) -> Any:
    """Nest dotted keys: {"0.message.role": "user"} -> [{"message": {"role": "user"}}].

    Levels whose keys are all integers become lists ordered by index (gaps dropped).
    A key that is both a leaf and a prefix keeps the nested form.
    """
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        if not isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = value
    return _listify(root)


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {k: _listify(v) if isinstance(v, dict) else v for k, v in node.items()}
    if converted and all(map(str.isdigit, converted)):
        return [converted[k] for k in sorted(converted, key=int)]
    return converted


def content_text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts in any common shape."""
    return _parsed_content_text(parse_json(content), content)


def _parsed_content_text(content: Any, recorded: Any) -> str:
    """`content_text` of `recorded`, given `content`, its `parse_json`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, MAPPING):
        content = [content]
    if not isinstance(content, list):
        return to_text(content) or ""
    if isinstance(recorded, str) and not any(map(_is_part, content)):
        return recorded  # a JSON answer (structured output), not a list of parts
    pieces = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, MAPPING):
            kind = part.get("type")
            if kind in ("reasoning", "thinking", "tool_call", "tool_call_response", "function_call"):
                continue
            text = part.get("text", part.get("content"))
            if text is None and isinstance(part.get("message_content"), MAPPING):
                text = part["message_content"].get("text")
            if isinstance(text, str):
                pieces.append(text)
    return "".join(pieces)


_PART_KEYS = ("type", "text", "content", "message_content")


def _is_part(item: Any) -> bool:
    return isinstance(item, str) or (isinstance(item, MAPPING) and any(key in item for key in _PART_KEYS))


def _tool_call(data: Any) -> ToolCall | None:
    if not isinstance(data, MAPPING):
        return None
    if isinstance(data.get("tool_call"), MAPPING):  # OpenInference nesting
        data = data["tool_call"]
    function = nested if isinstance(nested := data.get("function"), MAPPING) else data
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    call_id = data.get("id", data.get("call_id"))
    return ToolCall(
        id=str(call_id) if call_id is not None else None,
        name=name,
        arguments=parse_arguments(function.get("arguments", function.get("input"))),
    )


def _parsed_items(value: Any, parse: Callable[[Any], _T | None]) -> list[_T]:
    """`parse` of each item of a JSON list (a lone mapping is a list of one), the items it
    refuses (None) left out."""
    value = parse_json(value)
    if isinstance(value, MAPPING):
        value = [value]
    if not isinstance(value, list):
        return []
    return [parsed for parsed in (parse(item) for item in value) if parsed is not None]


def _tool_calls(value: Any) -> list[ToolCall]:
    return _parsed_items(value, _tool_call)


def _reasoning_texts(data: Mapping[str, Any]) -> list[str]:
    found = []
    for key in ("reasoning_content", "reasoning", "thinking"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            found.append(value)
    return found


def normalize_message(data: Any, default_role: str = "user") -> Message | None:
    """One message from the GenAI parts model, OpenAI chat, Responses items or OpenInference."""
    data = parse_json(data)
    if isinstance(data, str):
        return Message(role=default_role, content=data)
    if isinstance(data, list) and len(data) == 2 and all(isinstance(item, str) for item in data):
        speaker: str = data[0]
        return Message(role=ROLE_ALIASES.get(speaker, speaker), content=data[1])  # LangChain ("user", text)
    if not isinstance(data, MAPPING):
        return None
    if "data" in data and data.get("type") in _LANGCHAIN_TYPES and isinstance(data["data"], MAPPING):
        data = {"role": data["type"], **data["data"]}  # LangChain serialized message
    if isinstance(data.get("message"), MAPPING) and "role" not in data:
        data = data["message"]  # OpenInference `message.*`, GenAI choice events
    kind = data.get("type")
    if kind == "function_call":  # Responses API items
        call = _tool_call(data)
        return Message(role="assistant", tool_calls=[call] if call else [])
    if kind == "function_call_output":
        return Message(
            role="tool", content=to_text(data.get("output")) or "", tool_call_id=_str_or_none(data.get("call_id"))
        )
    if kind == "reasoning":
        summary = data.get("summary")
        texts = [p.get("text") for p in summary if isinstance(p, MAPPING)] if isinstance(summary, list) else []
        return Message(role="assistant", reasoning=[t for t in texts if isinstance(t, str) and t])
    role = data.get("role")
    role = ROLE_ALIASES.get(role, role) if isinstance(role, str) and role else default_role
    name = _str_or_none(data.get("name"))
    call_id = _str_or_none(data.get("tool_call_id", data.get("id") if role == "tool" else None))
    finish = data.get("finish_reason")
    finish = finish if isinstance(finish, str) else None
    # Built in one go. `reasoning` (and `tool_calls` from parts) is filled in place, not
    # passed, so it does not count as an explicitly set field.
    parts = data.get("parts")
    if isinstance(parts, list):
        if (
            role == "user"
            and parts
            and all(isinstance(p, MAPPING) and p.get("type") == "tool_call_response" for p in parts)
        ):
            role = "tool"  # tool results sent in a user turn (Strands, ADK) answer a call
        content, call_id, calls, reasoning = _read_parts(parts, call_id, role)
        message = new_message(dict(role=role, name=name, tool_call_id=call_id, content=content, finish_reason=finish))
        message.tool_calls.extend(calls)
    else:
        recorded = data.get("content", data.get("contents"))
        contents = parse_json(recorded)
        content = _parsed_content_text(contents, recorded)
        reasoning = _part_reasoning(contents) if isinstance(contents, list) else []
        calls = _tool_calls(data.get("tool_calls"))
        if isinstance(contents, list) and any(_is_tool_block(b) for b in contents):
            calls += _block_tool_calls(contents)
            result = _block_tool_result(contents)
            if result is not None:  # Bedrock sends tool results as user messages
                role, call_id, content = "tool", result[0] or call_id, result[1]
        message = new_message(
            dict(role=role, name=name, tool_call_id=call_id, content=content, tool_calls=calls, finish_reason=finish)
        )
        reasoning += _reasoning_texts(data)
    message.reasoning.extend(reasoning)
    return message


def _is_tool_block(block: Any) -> bool:
    return isinstance(block, MAPPING) and (
        block.get("type") in _SDK_TOOL_PARTS or not _BEDROCK_BLOCKS.isdisjoint(block)
    )


def _block_tool_calls(blocks: list[Any]) -> list[ToolCall]:
    """Tool calls as content blocks: Bedrock Converse `{"toolUse": {"toolUseId", "name",
    "input"}}` (Strands) and the AI SDK's `{"type": "tool-call", "toolCallId", "toolName",
    "input"}` parts."""
    calls = []
    for block in blocks:
        if not isinstance(block, MAPPING):
            continue
        use = block.get("toolUse")
        if isinstance(use, MAPPING) and isinstance(use.get("name"), str):
            calls.append(
                ToolCall(
                    id=_str_or_none(use.get("toolUseId")), name=use["name"], arguments=parse_arguments(use.get("input"))
                )
            )
        elif block.get("type") == "tool-call" and isinstance(block.get("toolName"), str):
            calls.append(
                ToolCall(
                    id=_str_or_none(block.get("toolCallId")),
                    name=block["toolName"],
                    arguments=parse_arguments(block.get("input", block.get("args"))),
                )
            )
    return calls


def _block_tool_result(blocks: list[Any]) -> tuple[str | None, str] | None:
    """(call id, text) of tool results as content blocks: Bedrock `{"toolResult":
    {"toolUseId", "content": [...]}}`, the AI SDK's `{"type": "tool-result", "toolCallId",
    "output": {"type", "value"}}` (`"result"` before AI SDK 5)."""
    found: list[tuple[str | None, str]] = []
    for block in blocks:
        if not isinstance(block, MAPPING):
            continue
        result = block.get("toolResult")
        if isinstance(result, MAPPING):
            found.append((_str_or_none(result.get("toolUseId")), block_text(result.get("content")) or ""))
        elif block.get("type") == "tool-result":
            output = block.get("output", block.get("result"))
            if isinstance(output, MAPPING) and "value" in output:
                output = output["value"]
            found.append((_str_or_none(block.get("toolCallId")), block_text(output) or ""))
    if not found:
        return None
    return found[0][0], "".join(text for _, text in found)


def _part_reasoning(parts: list[Any]) -> list[str]:
    texts = []
    for part in parts:
        if isinstance(part, MAPPING) and part.get("type") in ("reasoning", "thinking"):
            text = part.get("content", part.get("text", part.get("thinking")))
            if isinstance(text, str) and text:
                texts.append(text)
    return texts


def _read_parts(parts: list[Any], call_id: str | None, role: str) -> tuple[str, str | None, list[ToolCall], list[str]]:
    """Text, answered call id, tool calls and reasoning of a GenAI `parts` list.

    A tool's response is the text of a tool message only: an agent's output message
    that lists every step (the AI SDK's) carries them too, and they are not its answer.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, MAPPING):
            continue
        kind = part.get("type")
        if kind == "text":
            if isinstance(part.get("content"), str):
                texts.append(part["content"])
        elif kind == "tool_call":
            call = _tool_call(part)
            if call is not None:
                calls.append(call)
        elif kind == "tool_call_response":
            call_id = call_id or _str_or_none(part.get("id"))
            if role not in ("assistant", "model"):
                texts.append(block_text(part.get("response", part.get("result"))) or "")
        elif kind in ("reasoning", "thinking"):
            reasoning.extend(_part_reasoning([part]))
    return "".join(texts), call_id, calls, reasoning


def normalize_messages(value: Any, default_role: str = "user") -> list[Message]:
    """A message list from any supported shape; a bare string is one message."""
    value = parse_json(value)
    if value is None:
        return []
    if isinstance(value, MAPPING):
        for key in ("messages", "input", "prompt"):
            if isinstance(value.get(key), (list, str)):
                return normalize_messages(value[key], default_role)
        value = [value]
    if isinstance(value, str):
        return [Message(role=default_role, content=value)]
    if not isinstance(value, list):
        return []
    messages = [normalize_message(item, default_role) for item in value]
    return [m for m in messages if m is not None]


def _str_or_none(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)


def tool_definition(data: Any) -> ToolDefinition | None:
    """A tool from the OpenAI `{"type": "function", "function": {...}}` or flat shape."""
    data = parse_json(data)
    if not isinstance(data, MAPPING):
        return None
    if isinstance(data.get("tool"), MAPPING):  # OpenInference `tool.json_schema` nesting
        data = data["tool"]
        if "json_schema" in data:
            return tool_definition(data["json_schema"])
    function = nested if isinstance(nested := data.get("function"), MAPPING) else data
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    description = function.get("description")
    parameters = parse_json(next((function[key] for key in _SCHEMA_KEYS if key in function), None))
    return ToolDefinition(
        name=name,
        description=description if isinstance(description, str) else None,
        parameters=parameters if isinstance(parameters, dict) else None,
    )


_SCHEMA_KEYS = ("parameters", "input_schema", "json_schema", "inputSchema")


def tool_definitions(value: Any) -> list[ToolDefinition]:
    return _parsed_items(value, tool_definition)


def unwrap_call_input(value: Any) -> Any:
    """Decorator-captured call input `{"args": [...], "kwargs": {...}}` as the value it names.

    OpenLLMetry's and Langfuse's decorators record a function's input this way: one
    positional argument stands for itself, keyword arguments alone for the kwargs dict.
    smolagents adds flags of its own beside them (`sanitize_inputs_outputs`).
    """
    value = parse_json(value)
    if isinstance(value, MAPPING) and value and _is_call_input(value):
        args = value.get("args") or []
        kwargs = value.get("kwargs") or {}
        if isinstance(args, list) and isinstance(kwargs, MAPPING):
            if not args:
                return dict(kwargs)
            if len(args) == 1 and not kwargs:
                return args[0]
    return value


def _is_call_input(value: Mapping[str, Any]) -> bool:
    if not ("args" in value or "kwargs" in value):
        return False
    return all(key in ("args", "kwargs") or isinstance(flag, bool) or flag is None for key, flag in value.items())


def last_user_text(messages: Iterable[Message]) -> str | None:
    text = None
    for message in messages:
        if message.role == "user" and message.content:
            text = message.content
    return text


def io_text(value: Any) -> str | None:
    """The user-facing text of an agent-level input or output value.

    Message lists and chat payloads reduce to the latest user message (inputs) or the
    assistant text (outputs); anything else is shown as text.
    """
    value = unwrap_call_input(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    messages = normalize_messages(value) if _looks_like_messages(value) else []
    if messages:
        user = last_user_text(messages)
        if user is not None:
            return user
        for message in reversed(messages):
            if message.role in ("assistant", "model") and message.content:
                return message.content
    if isinstance(value, MAPPING):
        for key in ("output", "answer", "response", "result", "content", "text", "input", "query", "question"):
            if isinstance(value.get(key), str):
                return value[key]
    return to_text(value)


def _looks_like_messages(value: Any) -> bool:
    if isinstance(value, MAPPING):
        return isinstance(value.get("messages"), list) or "role" in value
    return isinstance(value, list) and any(
        isinstance(item, MAPPING) and ("role" in item or "type" in item) for item in value
    )
