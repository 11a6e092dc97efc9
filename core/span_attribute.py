"""An attribute a processor asks to have written on the span its results go on.

Scores say how an agent did; some results also need context beside them to be read
right, such as the eval-suite case an attempt was graded against (`eval.case.id`).
Only keys under `eval.` are allowed, so a processor can never overwrite what the
agent's own instrumentation recorded. With a `span_id` (hex, as `MetricResult.span_id`)
it goes on that span of the trace, beside a span-level result; without, on the trace's
anchor or the session's carrier. One naming a span the trace lacks is dropped
(`core.span_rollup.sort_attributes`): context for a result that is not written either.
"""

from __future__ import annotations

from dataclasses import dataclass

from spanscore.core.score_encoding import PREFIX


@dataclass(frozen=True)
class SpanAttribute:
    key: str
    value: str | int | float | bool
    span_id: str | None = None  # the span it goes on; None: the anchor (or carrier)

    def __post_init__(self) -> None:
        if not self.key.startswith(PREFIX) or len(self.key) == len(PREFIX):
            raise ValueError(f"a processor's span attribute must be under {PREFIX!r}, got {self.key!r}")
        if not isinstance(self.value, (str, int, float, bool)):
            raise ValueError(f"attribute {self.key} must be a string, number or bool, got {type(self.value).__name__}")
