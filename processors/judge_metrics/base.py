"""What the LLM-judge metrics need from a judge: one structured completion at a time.

A `Judge` sends chat messages to an OpenAI-compatible server and returns the JSON
object the model answered, validated against a JSON schema, with the token counts.
How it gets structured output (json_schema, json_object, or JSON parsed out of plain
text), retries, caching and concurrency are the implementation's business.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class JudgeError(Exception):
    """The judge gave no usable answer after every retry; `error_type` names why
    (e.g. `timeout`, `rate_limited`, `server_error`, `malformed_answer`); `calls` is how
    many HTTP requests were spent on it, for the usage accounting."""

    def __init__(self, message: str, error_type: str = "judge_error", calls: int = 0):
        super().__init__(message)
        self.error_type = error_type
        self.calls = calls


@dataclass(frozen=True)
class JudgeReply:
    data: dict[str, Any]  # the answer, already validated against the request's schema
    input_tokens: int
    output_tokens: int
    calls: int  # HTTP requests it took (retries included); 0 when served from the cache
    cached: bool = False


@dataclass(frozen=True)
class Verdict:
    """What a judged result says, read from the judge's answer: its score (0..1), the
    explanation and metadata."""

    score: float
    explanation: str
    metadata: dict[str, Any] = field(default_factory=dict)


class Judge(ABC):
    """Threading: `complete` is called concurrently from the event loop; the judge caps
    its own concurrency (`OpenAIJudge` adapts it to the server). It never raises anything
    but JudgeError for judge failures."""

    model: str

    @abstractmethod
    async def complete(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        schema_name: str,
    ) -> JudgeReply:
        """`messages`: OpenAI chat messages; `schema`: a JSON schema (type object) the
        answer must satisfy; `schema_name`: a short identifier for it (`^[a-zA-Z0-9_-]+$`)."""

    async def close(self) -> None:
        return None


@runtime_checkable
class UsesJudges(Protocol):
    """A processor that calls judges, so that the service can report their spend and
    health (`processors/judge_metrics/telemetry.py`)."""

    def judges(self) -> Sequence[Judge]:
        """The judges built so far (none before `start`)."""
        ...
