"""Which turn broke a session: the first failed turn that the later turns did not recover from.

A session is a conversation of turns (traces). A failed turn followed by one that passed
was recovered from; the turn that broke the session is the first failed one after which
every turn failed, up to the last. Its category is its first blamed error's.
"""

from __future__ import annotations

from dataclasses import dataclass

from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.localization.blame import NONE_FOUND

NAME = "breaking_turn"
RECOVERED = "recovered"  # the label when every failed turn was followed by one that passed


@dataclass(frozen=True)
class Turn:
    trace_id: str  # hex
    why_failed: str | None  # None: the turn passed
    category: str | None = None  # its first blamed error's
    span_id: str | None = None  # where that error shows


def breaking_turn(turns: list[Turn]) -> int | None:
    """The index of the turn that broke the session, or None when none did."""
    broken = None
    for index, turn in enumerate(turns):
        if turn.why_failed is None:
            broken = None
        elif broken is None:
            broken = index
    return broken


def session_outputs(turns: list[Turn], threshold: float) -> list[MetricResult | SpanAttribute]:
    """The session's result and the attributes naming the breaking turn; nothing when no
    turn failed. Score: the share of the session's turns before the one that broke it."""
    failed = [i for i, turn in enumerate(turns) if turn.why_failed is not None]
    if not failed:
        return []
    numbers = ", ".join(str(i + 1) for i in failed[:10]) + (", ..." if len(failed) > 10 else "")
    index = breaking_turn(turns)
    if index is None:
        return [
            MetricResult(
                name=NAME,
                score=1.0,
                threshold=threshold,
                class_label=RECOVERED,
                explanation=f"turn{'s' if len(failed) > 1 else ''} {numbers} of {len(turns)} failed; "
                "a later turn passed each time: the session recovered",
            )
        ]
    turn = turns[index]
    located = f"; first error {turn.category} at span {turn.span_id}" if turn.category else "; not located on a span"
    later = len(turns) - index - 1
    after = f"the {later} turn{'s' if later != 1 else ''} after it failed too" if later else "it was the last turn"
    result = MetricResult(
        name=NAME,
        score=index / len(turns),
        threshold=threshold,
        class_label=turn.category or NONE_FOUND,
        explanation=f"turn {index + 1} of {len(turns)} (trace {turn.trace_id}) broke the session: it failed "
        f"({turn.why_failed}) and {after}{located}",
    )
    keys = result_keys(NAME)
    attributes = [SpanAttribute(keys.field("turn"), index + 1), SpanAttribute(keys.field("trace_id"), turn.trace_id)]
    if turn.span_id:
        attributes.append(SpanAttribute(keys.field("span_id"), turn.span_id))
    return [result, *attributes]
