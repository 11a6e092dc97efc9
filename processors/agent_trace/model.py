"""The normalized agent trace: one model every metric reads, whatever convention produced it.

Field values are plain text and JSON-like Python values so metrics can quote them in
judge prompts or compare them directly. Ids are lowercase hex, as in OTLP/JSON.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

StepKind = Literal["llm", "tool", "retrieval"]
Arguments = dict[str, Any] | str | None


class ToolCall(BaseModel):
    """A tool call an LLM asked for."""

    id: str | None = None
    name: str
    arguments: Arguments = None


class ToolDefinition(BaseModel):
    """A tool offered to the agent."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # JSON schema


class Message(BaseModel):
    """A chat message with its text, the tool calls it makes and the call it answers."""

    role: str
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    reasoning: list[str] = Field(default_factory=list)
    finish_reason: str | None = None


class Document(BaseModel):
    """One document a retrieval returned, in the retriever's order.

    `content` is cut at `retrieval.MAX_DOCUMENT_CHARS` characters; `content_chars` is
    its length as recorded. `metadata` is the recorded metadata as a JSON-like value
    (text when it was not JSON, or too long to parse).
    """

    id: str | None = None
    content: str = ""
    content_chars: int = 0
    score: float | None = None
    metadata: Any = None


class Step(BaseModel):
    """One LLM call, tool call or retrieval, in start-time order within the trace.

    Tool steps: `name`, `arguments`, `result`, `error` and `tool_call_id`. A tool call
    seen only in an LLM's output (no span of its own) becomes a step too, with the
    span id of the LLM span that requested it and `from_span=False`.

    LLM steps: `model`, `input_messages`, `result` (the text it produced), `tool_calls`
    (what it asked for) and `reasoning`.

    Retrieval steps (a retriever, reranker or vector-store query): `query`,
    `documents` (the first `retrieval.MAX_DOCUMENTS`; a reranker's are its output) and
    `document_count` (how many the span recorded); `model` is a reranker's model.
    """

    kind: StepKind
    name: str
    span_id: str
    parent_span_id: str | None = None
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    arguments: Arguments = None
    result: str | None = None
    error: str | None = None
    tool_call_id: str | None = None
    from_span: bool = True
    model: str | None = None
    input_messages: list[Message] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasoning: list[str] = Field(default_factory=list)
    query: str | None = None
    documents: list[Document] = Field(default_factory=list)
    document_count: int = 0
    convention: str | None = None


class AgentTrace(BaseModel):
    """What one trace says the agent was asked, did and answered."""

    trace_id: str
    session_id: str | None = None
    user_id: str | None = None
    agent_name: str | None = None
    user_input: str = ""
    final_output: str = ""
    system_prompt: str | None = None
    steps: list[Step] = Field(default_factory=list)
    available_tools: list[ToolDefinition] = Field(default_factory=list)
    reasoning: list[str] = Field(default_factory=list)
    conventions: set[str] = Field(default_factory=set)
    error: str | None = None  # the root or agent span failed

    @property
    def recognized(self) -> bool:
        """An agent trace to score: a convention adapter read it, and found a run in it
        (model or tool calls, input or output). A lone `create_agent` span, an HTTP span
        or a lone vector-store query is not one."""
        return bool(self.conventions) and bool(
            any(step.kind != "retrieval" for step in self.steps) or self.user_input or self.final_output
        )

    @property
    def has_content(self) -> bool:
        """There is something to judge: the user's input or the agent's final output."""
        return bool(self.user_input or self.final_output)

    @property
    def llm_steps(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "llm"]

    @property
    def tool_steps(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "tool"]

    @property
    def retrieval_steps(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "retrieval"]

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.available_tools]

    @property
    def reasoning_text(self) -> str:
        return "\n".join(self.reasoning)


# Validated construction from a dict: the same as `Model(**fields)` without the Python
# frame of BaseModel.__init__, for the objects built once or more per span.
new_message = Message.__pydantic_validator__.validate_python
new_step = Step.__pydantic_validator__.validate_python
new_document = Document.__pydantic_validator__.validate_python
new_agent_trace = AgentTrace.__pydantic_validator__.validate_python
