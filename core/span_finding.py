"""A metric's finding about one span of the trace, written on that span.

Most results are about the whole trace and go on its root. A finding names the span it
is about (a failure_localization blame, say): the attach stage adds a
`gen_ai.evaluation.result` event to that span, and a log record correlated with it, so
the finding shows where a person looking at the trace looks. Attributes beyond the
evaluation's own are under `eval.`, as every processor's are.
"""

from __future__ import annotations

from dataclasses import dataclass

from spanscore.core.score_encoding import PREFIX

Value = str | int | float | bool


@dataclass(frozen=True)
class SpanFinding:
    span_id: bytes  # the span the finding is about, 8 bytes
    name: str  # the metric that found it: gen_ai.evaluation.name
    label: str  # gen_ai.evaluation.score.label
    explanation: str
    attributes: tuple[tuple[str, Value], ...] = ()

    def __post_init__(self) -> None:
        if len(self.span_id) != 8 or not any(self.span_id):
            raise ValueError(f"a finding's span id must be 8 bytes, not all zero, got {self.span_id.hex()!r}")
        for key, value in self.attributes:
            if not key.startswith(PREFIX) or len(key) == len(PREFIX):
                raise ValueError(f"a finding's attribute must be under {PREFIX!r}, got {key!r}")
            if not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"attribute {key} must be a string, number or bool, got {type(value).__name__}")

    def attribute(self, key: str) -> Value | None:
        return next((value for name, value in self.attributes if name == key), None)
