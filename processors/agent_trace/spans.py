"""Per-span reading shared by the convention adapters.

`SpanView` is what the adapters agree on: each adapter recognises its convention on a
span and fills the fields it knows, never overwriting what an earlier (more specific)
adapter already found.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanscore.core.attributes import find_attribute
from spanscore.processors.agent_trace.attributes import SpanAttributes
from spanscore.processors.agent_trace.model import Document, Message, ToolDefinition

__all__ = ["AGENT", "CHAIN", "LLM", "OTHER", "RETRIEVAL", "TOOL", "SpanAttributes", "SpanView", "span_error"]

# What a span is, independent of convention.
AGENT = "agent"
CHAIN = "chain"
LLM = "llm"
TOOL = "tool"
RETRIEVAL = "retrieval"  # a retriever, reranker or vector-store query
OTHER = "other"


class SpanView:
    """One span as the builder sees it, whatever convention described it.

    Fields an adapter has not set read as the class defaults below, so a view costs
    only the span's own fields to make.
    """

    role: str | None = None
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
    model: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    tool_arguments: Any = None
    tool_result: Any = None
    tool_description: str | None = None
    tool_parameters: Any = None
    retrieval_query: str | None = None
    documents: list[Document] | None = None  # already bounded (`retrieval.MAX_DOCUMENTS`)
    document_count: int = 0  # how many the span recorded
    error: str | None = None
    # The span records a model call that completed: token usage, a finish reason or a
    # response id. Spans that only prepare a request record none of these.
    called: bool = False
    depth: int = 0

    def __init__(self, span: Span, scope: str = ""):
        self.span = span
        self.attrs = SpanAttributes(span.attributes)
        self.span_id = span.span_id.hex()
        self.parent_id = span.parent_span_id.hex() or None
        self.name = span.name
        self.start = span.start_time_unix_nano
        self.end = span.end_time_unix_nano
        self.scope = scope
        self.conventions: set[str] = set()
        self.tools: list[ToolDefinition] = []
        if span.status.code == Status.STATUS_CODE_ERROR:
            self.error = span_error(span)

    @classmethod
    def of(cls, span: Span, scope: str = "") -> SpanView:
        return cls(span, scope)

    def __repr__(self) -> str:
        return f"SpanView({self.span_id} {self.name!r} role={self.role})"

    def fill(self, name: str, value: Any) -> None:
        """Set a field unless an earlier adapter already set it (empty values never win)."""
        if value is None or value == "" or value == []:
            return
        current = getattr(self, name)
        if current is None or current == "" or current == []:
            setattr(self, name, value)

    def add_tools(self, tools: Iterable[ToolDefinition]) -> None:
        if not tools:
            return
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
