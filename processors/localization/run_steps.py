"""A run as the judge reads it: numbered steps, each with its span id, cut to fit.

A step is one model or tool call of the normalized trace (calls seen only in a model's
output are left out: they have no span of their own to blame). A model call shows what
it produced (text and the tool calls it asked for), not the messages it was sent: those
repeat the earlier steps and hold most of a long run's bytes. Every text field is cut
to `field_chars` characters, with how long it was; a step still too large for a window
is shown with shorter fields (`render_to_fit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spanscore.processors.agent_trace import AgentTrace, Step
from spanscore.processors.judge_metrics.prompts import as_text, neutralize
from spanscore.processors.judge_metrics.token_estimate import estimate_tokens

MIN_FIELD_CHARS = 60  # below this a field says nothing; a step is then its header alone


@dataclass(frozen=True)
class RunStep:
    number: int  # 1-based, in start order
    span_id: str
    step: Step


def run_steps(run: AgentTrace) -> list[RunStep]:
    steps = sorted((s for s in run.steps if s.from_span), key=lambda s: s.start_time_unix_nano)
    return [RunStep(number, step.span_id, step) for number, step in enumerate(steps, start=1)]


def _cut(value, limit: int) -> str:
    text = neutralize(as_text(value)).replace("\n", "\n    ")
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text)} characters]"


def render(step: RunStep, field_chars: int) -> str:
    """One step as text: `[n] span <id> · <kind> <name>` then its fields, each cut."""
    s = step.step
    if s.kind == "tool":
        lines = [f"[{step.number}] span {step.span_id} · tool {s.name}"]
        if field_chars >= MIN_FIELD_CHARS:
            lines.append(f"  arguments: {_cut(s.arguments, field_chars)}")
            lines.append(f"  result: {_cut(s.result, field_chars)}")
    elif s.kind == "retrieval":
        lines = [f"[{step.number}] span {step.span_id} · retrieval {s.name}"]
        if field_chars >= MIN_FIELD_CHARS:
            lines.append(f"  query: {_cut(s.query, field_chars)}")
            lines.append(f"  documents: {s.document_count}")
    else:
        lines = [f"[{step.number}] span {step.span_id} · model call {s.name}"]
        if field_chars >= MIN_FIELD_CHARS:
            if s.result:
                lines.append(f"  output: {_cut(s.result, field_chars)}")
            for call in s.tool_calls:
                lines.append(f"  asks for tool {call.name}: {_cut(call.arguments, field_chars)}")
    if s.error:
        lines.append(f"  error: {_cut(s.error, max(field_chars, MIN_FIELD_CHARS))}")
    return "\n".join(lines)


def render_to_fit(step: RunStep, field_chars: int, room_tokens: int) -> str:
    """`render(step, field_chars)`, with shorter fields when it takes more than
    `room_tokens`; its header alone (cut, as a last resort) when nothing else fits."""
    text = render(step, field_chars)
    while estimate_tokens(text) > room_tokens and field_chars >= MIN_FIELD_CHARS:
        field_chars = field_chars // 2
        text = render(step, field_chars)
    if estimate_tokens(text) > room_tokens:
        text = text.encode("utf-8")[: max(0, room_tokens * 3 - 3)].decode("utf-8", "ignore")
    return text
