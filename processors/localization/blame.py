"""One error found in a run: where it shows, what kind it is, how much it mattered, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Impact = Literal["low", "medium", "high"]
IMPACTS: tuple[Impact, ...] = ("low", "medium", "high")
NONE_FOUND = "none_found"  # the label of a failed run (or turn) whose failure was not located
EVIDENCE_SOURCE = "evidence"  # eval.failure.source of what the spans state; a judge's blames carry its model


@dataclass(frozen=True)
class Blame:
    span_id: str  # lowercase hex, as in OTLP/JSON
    category: str  # a taxonomy id
    impact: Impact
    evidence: str  # what the span says, quoted
    explanation: str  # one line
    source: str = EVIDENCE_SOURCE
    rule: str | None = None  # the evidence rule that found it
