"""What failure_localization wrote on a scored trace, read back: its result on the root
and the spans it blamed, for `inspect` to mark the blamed steps and `report` to count
why attempts failed.

The encoding is docs/score-encoding.md's ("Findings on other spans"): on each blamed
span a `gen_ai.evaluation.result` event named `failure_localization` with the finding's
`eval.failure.*` attributes; on the root `eval.failure_localization.*`, the blamed span
ids among them. The root carries an event of the same name too (every result does); it
has no `eval.failure.category`, which tells it from a finding. A file written with
`span_events: false` has no findings on its spans: then the root's label and first span
id stand for the first error, the only one the root names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from spanscore.core.evaluation_event import EXPLANATION, evaluation_events
from spanscore.core.score_encoding import (
    FAILURE_CATEGORY,
    FAILURE_EVIDENCE,
    FAILURE_GROUP,
    FAILURE_IMPACT,
    FAILURE_SOURCE,
    read_result,
)
from spanscore.core.trace import Trace
from spanscore.processors.localization.blame import NONE_FOUND
from spanscore.processors.localization.taxonomy import taxonomy

METRIC = "failure_localization"
GROUPS = tuple(taxonomy().groups)


@dataclass(frozen=True)
class Blamed:
    """One error blamed on one span."""

    trace_id: str
    span_id: str
    span_name: str
    category: str
    group: str | None
    impact: str | None  # low, medium or high; None when only the root named it
    evidence: str | None
    explanation: str
    source: str | None  # `evidence`, or the judge's model

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Localization:
    """failure_localization's result on the root of one trace."""

    score: float | None
    label: str | None  # the first error's category, or none_found
    explanation: str | None
    span_ids: tuple[str, ...]
    errors: int | None
    errors_by_group: dict[str, int]

    @property
    def found(self) -> bool:
        return self.label not in (None, NONE_FOUND)

    def as_json(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "label": self.label,
            "explanation": self.explanation,
            "span_ids": list(self.span_ids),
            "errors": self.errors,
            "errors_by_group": self.errors_by_group,
        }


def localization_of(trace: Trace) -> Localization | None:
    """The root's result, or None when failure_localization left none on it."""
    anchor = trace.anchor
    if anchor is None:
        return None
    result = read_result(anchor.attributes, METRIC)
    if result is None:
        return None
    span_ids = tuple(s for s in str(result.get("span_ids") or "").split(",") if s)
    return Localization(
        score=result.score,
        label=_text(result.get("label")),
        explanation=_text(result.get("explanation")),
        span_ids=span_ids,
        errors=_count(result.get("errors")),
        errors_by_group={g: n for g in GROUPS if (n := _count(result.get(f"errors.{g}"))) is not None},
    )


def blamed_in(trace: Trace, localization: Localization | None = None) -> list[Blamed]:
    """Every error blamed on a span of `trace`, in the root's order of span ids (spans it
    does not list after them, in the file's order)."""
    localization = localization or localization_of(trace)
    trace_id = trace.trace_id_hex
    found: list[Blamed] = []
    names: dict[str, str] = {}
    for span, _ in trace.spans():
        span_id = span.span_id.hex()
        names[span_id] = span.name
        for event in evaluation_events(span):
            category = event.get(FAILURE_CATEGORY)
            if event.name != METRIC or not category:
                continue
            found.append(
                Blamed(
                    trace_id=trace_id,
                    span_id=span_id,
                    span_name=span.name,
                    category=str(category),
                    group=_text(event.get(FAILURE_GROUP)) or group_of(str(category)),
                    impact=_text(event.get(FAILURE_IMPACT)),
                    evidence=_text(event.get(FAILURE_EVIDENCE)),
                    explanation=str(event.get(EXPLANATION) or ""),
                    source=_text(event.get(FAILURE_SOURCE)),
                )
            )
    if localization is None:
        return found
    if not found and localization.found and localization.span_ids:
        # No findings on the spans (span_events: false): the root names the first error.
        first = localization.span_ids[0]
        label = str(localization.label)
        found.append(Blamed(trace_id, first, names.get(first, ""), label, group_of(label), None, None, "", None))
    order = {span_id: i for i, span_id in enumerate(localization.span_ids)}
    return sorted(found, key=lambda b: order.get(b.span_id, len(order)))


def group_words(group: str | None) -> str:
    """A group id as words: `system_execution` -> `system execution`."""
    return group.replace("_", " ") if group else "unknown group"


def group_of(category: str) -> str | None:
    """The taxonomy's group of `category`; None for a category it does not list."""
    known = taxonomy().categories.get(category)
    return known.group if known is not None else None


def _text(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _count(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
