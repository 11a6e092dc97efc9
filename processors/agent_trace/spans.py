"""Per-span reading shared by the convention adapters.

`SpanAttributes` indexes a span's attribute keys on first use and converts a value only
when it is asked for (through `collector.attributes.any_value_to_python`), so a trace is
normalized without turning every attribute of every span into Python objects.

`SpanView` is what the adapters agree on: each adapter recognises its convention on a
span and fills the fields it knows, never overwriting what an earlier (more specific)
adapter already found.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from collector.attributes import any_value_to_python, find_attribute
from processors.agent_trace.content import unflatten
from processors.agent_trace.model import Message, ToolDefinition

# What a span is, independent of convention.
AGENT = "agent"
CHAIN = "chain"
LLM = "llm"
TOOL = "tool"
OTHER = "other"


class SpanAttributes:
    """Read-only, lazily converted view of an OTLP attribute list. Not thread-safe."""

    __slots__ = ("_attributes", "_index", "_cache")

    def __init__(self, attributes: Iterable[KeyValue]):
        self._attributes = attributes
        self._index: dict[str, AnyValue] | None = None
        self._cache: dict[str, Any] = {}

    def _keys(self) -> dict[str, AnyValue]:
        if self._index is None:
            index: dict[str, AnyValue] = {}
            for kv in self._attributes:
                index.setdefault(kv.key, kv.value)  # first wins, as in find_attribute
            self._index = index
        return self._index

    def __contains__(self, key: str) -> bool:
        return key in self._keys()

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._cache:
            return self._cache[key]
        raw = self._keys().get(key)
        if raw is None:
            return default
        value = any_value_to_python(raw)
        self._cache[key] = value
        return default if value is None else value

    def first(self, *keys: str) -> Any:
        for key in keys:
            value = self.get(key)
            if value is not None and value != "":
                return value
        return None

    def text(self, *keys: str) -> str | None:
        """The first present key as a string (scalars stringified, structures skipped)."""
        for key in keys:
            value = self.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
        return None

    def has_prefix(self, prefix: str) -> bool:
        return any(key.startswith(prefix) for key in self._keys())

    def with_prefix(self, prefix: str) -> dict[str, Any]:
        """Keys under `prefix` (stripped of it) with their values."""
        return {key[len(prefix):]: self.get(key) for key in self._keys() if key.startswith(prefix)}

    def nested(self, prefix: str) -> Any:
        """Indexed keys under `prefix` (e.g. `gen_ai.prompt.`) nested into lists and dicts."""
        flat = self.with_prefix(prefix)
        return unflatten(flat) if flat else None


@dataclass
class SpanView:
    """One span as the builder sees it, whatever convention described it."""

    span: Span
    attrs: SpanAttributes
    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int
    scope: str = ""
    role: str | None = None
    conventions: set[str] = field(default_factory=set)
    agent_name: str | None = None
    user_id: str | None = None
    input: Any = None  # agent/chain level input and output, raw
    output: Any = None
    trace_input: Any = None  # set by conventions that describe the whole trace on a span
    trace_output: Any = None
    trace_name: str | None = None
    input_messages: list[Message] | None = None
    output_messages: list[Message] | None = None
    system_prompt: str | None = None
    tools: list[ToolDefinition] = field(default_factory=list)
    model: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: Any = None
    tool_result: Any = None
    tool_description: str | None = None
    tool_parameters: Any = None
    error: str | None = None
    depth: int = 0

    @classmethod
    def of(cls, span: Span, scope: str = "") -> SpanView:
        view = cls(
            span=span,
            attrs=SpanAttributes(span.attributes),
            span_id=span.span_id.hex(),
            parent_id=span.parent_span_id.hex() or None,
            name=span.name,
            start=span.start_time_unix_nano,
            end=span.end_time_unix_nano,
            scope=scope,
        )
        view.error = span_error(span)
        return view

    def fill(self, name: str, value: Any) -> None:
        """Set a field unless an earlier adapter already set it (empty values never win)."""
        if value is None or value == "" or value == []:
            return
        if getattr(self, name) in (None, "", []):
            setattr(self, name, value)

    def add_tools(self, tools: Iterable[ToolDefinition]) -> None:
        known = {tool.name for tool in self.tools}
        for tool in tools:
            if tool.name not in known:
                self.tools.append(tool)
                known.add(tool.name)


def span_error(span: Span) -> str | None:
    """Why a span failed: status message, the recorded exception, or its error.type."""
    if span.status.code != Status.STATUS_CODE_ERROR:
        return None
    for event in span.events:
        if event.name == "exception":
            message = find_attribute(event.attributes, "exception.message")
            kind = find_attribute(event.attributes, "exception.type")
            if message or kind:
                return f"{kind}: {message}" if kind and message else str(message or kind)
    if span.status.message:
        return span.status.message
    error_type = find_attribute(span.attributes, "error.type")
    return str(error_type) if error_type else "error"
