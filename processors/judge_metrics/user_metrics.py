"""Judge metrics of your own: a prompt, an output kind and a target, from config.

`processors.judge_metrics.metrics.<name>` with a `prompt` defines one. The prompt is the
instructions; the texts it names by placeholder (`{input}`, `{output}`, `{context}`,
`{tool_calls}`, `{steps}`, `{expected_output}`, `{attributes.KEY}`) go into the data block PromptBuilder
builds (redacted, cut, defanged inside `<trace_data>`), never into the instructions: in
the prompt a placeholder becomes a pointer to its field in the block, and delimiter
text the prompt itself holds is defanged as the block's is. `{{` and `}}` are
literal braces. The answer's JSON schema comes from `output`; the judge client checks it
and asks again when it is malformed, as for the built-ins.

One call per scored target: the trace, or each span `on:` selects (`SpanTarget`); all of
a trace's calls at once. `on: session`: one call when the session closes, over the turns
its traces left (`SessionTurn`, kept in the session's state as each trace is scored):
`{steps}` every turn's user message, steps and answer as one numbered run, `{input}` the
first user message, `{output}` the last answer, `{context}` and `{tool_calls}` those of
every turn, `{attributes.KEY}` the first trace's root's.

`{expected_output}` is the answer the judge_metrics `dataset` (an eval suite's cases)
expects of the trace's turn (processors/expected_output.py), on `trace` only; a trace
that joins no case, or whose turn has none, is skipped with the reason, without a call.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import median
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.result import MetricResult
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import AgentTrace, Step, agent_trace_of
from spanscore.processors.expected_output import ExpectedOutput
from spanscore.processors.judge_metrics.base import Judge, JudgeError, Verdict
from spanscore.processors.judge_metrics.planner import INPUT_TOO_LARGE, MIN_DATA_TOKENS, Usage
from spanscore.processors.judge_metrics.prompts import (
    TRACE_CLOSE,
    TRACE_OPEN,
    Entry,
    Layout,
    Line,
    PromptBuilder,
    neutralize,
    prompt_tokens,
)
from spanscore.processors.judge_metrics.rubrics import MALFORMED, NOT_APPLICABLE
from spanscore.processors.judge_metrics.trace_view import DoesNotFit, fit
from spanscore.processors.judge_metrics.trials import run_trials, trials_metadata

ATTRIBUTES = "attributes"
SESSION = "session"
EXPECTED_OUTPUT = "expected_output"  # from the dataset, not the trace: a trace's turn only
# What each target can fill; `attributes.KEY` is the scored span's (the root for trace,
# the first trace's root for session).
FILLABLE: dict[str, frozenset[str]] = {
    "trace": frozenset({"input", "output", "context", "tool_calls", "steps", EXPECTED_OUTPUT, ATTRIBUTES}),
    SESSION: frozenset({"input", "output", "context", "tool_calls", "steps", ATTRIBUTES}),
    "llm": frozenset({"input", "output", "tool_calls", ATTRIBUTES}),
    "tool": frozenset({"input", "output", ATTRIBUTES}),
    "retrieval": frozenset({"input", "context", ATTRIBUTES}),
    "agent": frozenset({ATTRIBUTES}),
}
PLACEHOLDERS = ("input", "output", "context", "tool_calls", "steps", "expected_output", "attributes.KEY")
NEEDS_DATASET = (
    "{expected_output} is the answer a suite's dataset expects: give judge_metrics a dataset "
    "(an eval suite's cases, as ground_truth reads them)"
)


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


REASON = {"type": "string"}


class Categories(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    categories: list[str] = Field(min_length=2)
    passing: list[str] = Field(alias="pass", min_length=1)

    @model_validator(mode="after")
    def _pass_among_categories(self) -> Categories:
        if len(set(self.categories)) != len(self.categories):
            raise ValueError(f"categories: listed twice in {self.categories}")
        unknown = [label for label in self.passing if label not in self.categories]
        if unknown:
            raise ValueError(f"pass: {unknown} are not among the categories {self.categories}")
        return self


class Scale(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    scale: tuple[float, float]

    @model_validator(mode="after")
    def _ordered(self) -> Scale:
        low, high = self.scale
        if not low < high:
            raise ValueError(f"scale: expected [low, high] with low < high, got {list(self.scale)}")
        return self


OUTPUT_KINDS = "binary, score, {scale: [lo, hi]} or {categories: [...], pass: [...]}"


def output_spec(value: Any) -> str | Categories | Scale | None:
    """`output` as written, read into its kind; ValueError naming what is wrong."""
    if value is None or value in ("binary", "score") or isinstance(value, (Categories, Scale)):
        return value
    if isinstance(value, dict):
        kind = Scale if "scale" in value else Categories if "categories" in value else None
        if kind is not None:
            try:
                return kind.model_validate(value)
            except ValidationError as exc:
                problems = [
                    f"{'.'.join(map(str, e['loc'])) + ': ' if e['loc'] else ''}{e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors(include_url=False)
                ]
                raise ValueError("; ".join(problems)) from None
    raise ValueError(f"expected {OUTPUT_KINDS}, got {value!r}")


OutputSpec = Annotated[Literal["binary", "score"] | Categories | Scale | None, PlainValidator(output_spec)]


def placeholders(prompt: str) -> list[str]:
    """The placeholders of `prompt`, in order; ValueError for a malformed one."""
    try:
        parsed = list(string.Formatter().parse(prompt))
    except ValueError as exc:
        raise ValueError(f"{exc}; write {{{{ and }}}} for literal braces") from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"placeholder {{{name}}} takes no format spec or conversion")
        names.append(name)
    return names


def check_prompt(prompt: str, on: str, has_dataset: bool = False) -> str:
    """`prompt`, when every placeholder is known and `on` can fill it (`{expected_output}`
    with a dataset only); else ValueError."""
    problems = []
    for name in placeholders(prompt):
        field = ATTRIBUTES if name.startswith(ATTRIBUTES + ".") and len(name) > len(ATTRIBUTES) + 1 else name
        if field not in FILLABLE["trace"]:
            problems.append(f"unknown placeholder {{{name}}}; known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        elif field not in FILLABLE[on]:
            can = ", ".join("{" + (p + ".KEY" if p == ATTRIBUTES else p) + "}" for p in sorted(FILLABLE[on]))
            problems.append(f"{{{name}}} cannot be filled on: {on} (it fills {can})")
        elif field == EXPECTED_OUTPUT and not has_dataset:
            problems.append(NEEDS_DATASET)
    if problems:
        raise ValueError("; ".join(problems))
    return prompt


# --- one metric ------------------------------------------------------------------------


@dataclass(frozen=True)
class UserMetric:
    """A user's judge metric as asked: its instructions, answer schema and scoring."""

    name: str
    prompt: str
    output: Any  # OutputSpec
    on: str
    threshold: float
    examples: str = ""  # the worked examples' text, before the instructions

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(placeholders(self.prompt)))

    def instructions(self, labels: Mapping[str, str] | None = None) -> str:
        """The prompt, each placeholder a pointer to its field in the data block; `labels`
        names the fields a block shows under another label (the combined call's)."""
        # Parsed, not formatted: `attributes.app.tier` is a key, not attribute access.
        labels = labels or {}

        def pointer(name: str) -> str:
            where = f"{labels[name]} in trace_data" if name in labels else "trace_data"
            return f"[{name}: see {where} above]"

        # The prompt's own delimiter text defanged too: the only delimiters are spanscore's.
        parts = string.Formatter().parse(self.prompt)
        text = "".join(neutralize(literal) + (pointer(name) if name else "") for literal, name, _, _ in parts)
        own = text + "\n" + self._answer_line()
        return f"{self.examples}\n\n{own}" if self.examples else own

    def _answer_line(self) -> str:
        if self.output == "binary":
            return 'Answer with a JSON object: {"reason": "<one or two sentences>", "pass": true or false}.'
        if isinstance(self.output, Categories):
            labels = ", ".join(json.dumps(c) for c in self.output.categories)
            return f'Answer with a JSON object: {{"reason": "<one or two sentences>", "category": one of {labels}}}.'
        low, high = self.output.scale if isinstance(self.output, Scale) else (0.0, 1.0)
        score = f"<number from {low:g} to {high:g}>"
        return f'Answer with a JSON object: {{"reason": "<one or two sentences>", "score": {score}}}.'

    def schema(self) -> dict[str, Any]:
        if self.output == "binary":
            return _object({"reason": REASON, "pass": {"type": "boolean"}})
        if isinstance(self.output, Categories):
            return _object({"reason": REASON, "category": {"type": "string", "enum": list(self.output.categories)}})
        low, high = self.output.scale if isinstance(self.output, Scale) else (0.0, 1.0)
        return _object({"reason": REASON, "score": {"type": "number", "minimum": low, "maximum": high}})

    def verdict(self, answer: Mapping[str, Any]) -> Verdict:
        """The answer (already schema-checked by the judge client) as a 0..1 score."""
        reason = str(answer.get("reason", "")).strip()
        if self.output == "binary":
            passed = answer.get("pass")
            if not isinstance(passed, bool):
                raise JudgeError(f"{self.name}: pass must be true or false", MALFORMED)
            return Verdict(1.0 if passed else 0.0, reason, {"pass": passed})
        if isinstance(self.output, Categories):
            category = answer.get("category")
            if category not in self.output.categories:
                raise JudgeError(f"{self.name}: category {category!r} is not one of the categories", MALFORMED)
            return Verdict(1.0 if category in self.output.passing else 0.0, reason, {"category": category})
        raw = answer.get("score")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise JudgeError(f"{self.name}: score must be a number", MALFORMED)
        if isinstance(self.output, Scale):
            low, high = self.output.scale
            if not low <= raw <= high:
                raise JudgeError(f"{self.name}: score {raw!r} is outside the scale {[low, high]}", MALFORMED)
            return Verdict((raw - low) / (high - low), reason, {"raw_score": raw, "scale": [low, high]})
        if not 0.0 <= raw <= 1.0:
            raise JudgeError(f"{self.name}: score {raw!r} is outside [0, 1]", MALFORMED)
        return Verdict(float(raw), reason, {})


# --- the texts a target fills ------------------------------------------------------------


def _attributes_by_span(trace: Trace) -> dict[str, dict[str, Any]]:
    return {span.span_id.hex(): attributes_to_dict(span.attributes) for span, _ in trace.spans()}


def _tool_calls_text(steps: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {"name": step.name, "arguments": step.arguments, "result": step.result, "error": step.error}
        for step in steps
        if step.kind == "tool"
    ]


def _documents(steps: Sequence[Step]) -> list[str]:
    return [document.content for step in steps if step.kind == "retrieval" for document in step.documents]


def target_texts(field: str, on: str, agent: AgentTrace, step: Step | None) -> Any:
    """The text (or JSON-like value) that fills `field` for the target (for a session,
    `agent` is its `session_run`)."""
    if on in ("trace", SESSION):
        return {
            "input": agent.user_input,
            "output": agent.final_output,
            "context": _documents(agent.steps),
            "tool_calls": _tool_calls_text(agent.steps),
        }[field]
    assert step is not None
    if on == "llm":
        return {
            "input": "\n".join(f"{m.role}: {m.content}" for m in step.input_messages),
            "output": step.result,
            "tool_calls": [{"name": call.name, "arguments": call.arguments} for call in step.tool_calls],
        }[field]
    if on == "tool":
        return {"input": step.arguments, "output": step.result if step.error is None else f"error: {step.error}"}[field]
    return {"input": step.query, "context": [document.content for document in step.documents]}[field]


# --- a session's turns -------------------------------------------------------------------


@dataclass(frozen=True)
class SessionTurn:
    """What one trace leaves its session's judge metrics: its run, and its root's attributes."""

    agent: AgentTrace
    attributes: Mapping[str, Any]


def session_turn(trace: Trace, first: bool) -> SessionTurn:
    """The turn `trace` is; its root's attributes kept for the session's `first` only, the
    one `{attributes.KEY}` reads."""
    anchor = trace.anchor
    attributes = attributes_to_dict(anchor.attributes) if first and anchor is not None else {}
    return SessionTurn(agent_trace_of(trace), attributes)


def session_run(turns: Sequence[AgentTrace]) -> AgentTrace:
    """The session as one run, for the fields a trace fills: the first user message, the
    last answer (of the turns that recorded one), every turn's steps in order."""
    first = turns[0]
    return AgentTrace(
        trace_id=first.trace_id,
        session_id=first.session_id,
        agent_name=first.agent_name,
        user_input=next((turn.user_input for turn in turns if turn.user_input), ""),
        final_output=next((turn.final_output for turn in reversed(turns) if turn.final_output), ""),
        steps=[step for turn in turns for step in turn.steps],
    )


# --- the calls ---------------------------------------------------------------------------


def _overhead(metric: UserMetric, trial: int = 0) -> int:
    """Estimated tokens of a call without its data block: system message, instructions, schema."""
    return prompt_tokens(PromptBuilder().messages("", metric.instructions(), trial=trial), metric.schema())


def room_problem(metric: UserMetric, max_input_tokens: int) -> str | None:
    """Why `max_input_tokens` leaves the metric's data too little room beside its own
    text, or None."""
    tokens = _overhead(metric, trial=9)  # a late trial's suffix, as the built-ins reserve it
    if max_input_tokens - tokens >= MIN_DATA_TOKENS:
        return None
    return (
        f"{max_input_tokens:,} leaves the trace too little room: {metric.name}'s call takes about {tokens:,} tokens "
        f"without it and the trace needs at least {MIN_DATA_TOKENS:,}; set at least {tokens + MIN_DATA_TOKENS:,}"
    )


@dataclass(frozen=True)
class Target:
    span_id: str | None  # None: the trace, or the session
    step: Step | None
    attributes: Mapping[str, Any]
    turns: tuple[AgentTrace, ...] = ()  # a session's, in the order they were scored
    expected_output: str | None = None  # the dataset's, for a trace target


class UserMetrics:
    """Asks `judge` each user metric on each of its targets in a trace.

    Threading: immutable; `judge_trace` may run concurrently for several traces.
    """

    def __init__(
        self,
        metrics: Sequence[tuple[UserMetric, Any]],  # each with its SpanTarget settings
        builder: PromptBuilder,
        max_input_tokens: int,
        trials: int = 1,
    ):
        self.metrics = list(metrics)
        self.builder = builder
        self.max_input_tokens = max_input_tokens
        self.trials = trials
        self.session_metric_names = tuple(metric.name for metric, _ in self.metrics if metric.on == SESSION)

    def layout(self, metric: UserMetric, agent: AgentTrace, target: Target) -> Layout:
        """The data block of one call: each placeholder's field, labelled, inside the
        delimiters; `{steps}` as the built-ins' numbered steps, which `fit` may leave out."""
        head: list[Line] = [(TRACE_OPEN,)]
        entries: tuple = ()
        tail: list[Line] = []
        for name in metric.fields:
            if name == "steps":
                entries = (
                    self.session_entries(target.turns)
                    if metric.on == SESSION
                    else self.builder.trace_layout(agent).entries
                )
                head.append(("steps:",) if entries else ("steps: none",))
                continue
            if name.startswith(ATTRIBUTES + "."):
                value = target.attributes.get(name[len(ATTRIBUTES) + 1 :])
            elif name == EXPECTED_OUTPUT:
                value = target.expected_output
            else:
                value = target_texts(name, metric.on, agent, target.step)
            (tail if entries else head).append((f"{name}: ", self.builder.redacted(value)))
        tail.append((TRACE_CLOSE,))
        return Layout(tuple(head), entries, tuple(tail))

    def messages(self, metric: UserMetric, agent: AgentTrace, target: Target, trial: int = 0) -> list[dict[str, str]]:
        """The call's `[system, user]` messages: the data block fit to `max_input_tokens`
        (which the config checked leaves it room)."""
        instructions = metric.instructions()
        room = self.max_input_tokens - _overhead(metric, trial)
        try:
            view = fit(self.layout(metric, agent, target), self.builder.max_field_chars, room)
        except DoesNotFit as exc:
            raise JudgeError(
                f"the texts do not fit max_input_tokens ({self.max_input_tokens:,}): {exc}", INPUT_TOO_LARGE
            ) from None
        return self.builder.messages(view.text, instructions, trial=trial)

    def targets(self, on_settings: Any, metric: UserMetric, trace: Trace, agent: AgentTrace) -> list[Target]:
        if metric.on == SESSION:  # judged when the session closes
            return []
        attributes = _attributes_by_span(trace)
        if metric.on == "trace":
            anchor = trace.anchor
            return [Target(None, None, attributes.get(anchor.span_id.hex(), {}) if anchor is not None else {})]
        if metric.on == "agent":
            return [Target(span_id, None, attributes.get(span_id, {})) for span_id in on_settings.span_ids(trace)]
        return [Target(step.span_id, step, attributes.get(step.span_id, {})) for step in on_settings.select(trace)]

    async def judge_trace(
        self, trace: Trace, judge: Judge, expected: ExpectedOutput | str | None = None
    ) -> tuple[list[MetricResult], Usage]:
        """`expected`: the trace's expected output, or why it has none, for the metrics
        whose prompt names `{expected_output}`."""
        agent = agent_trace_of(trace)
        usage = Usage()
        calls = []
        for metric, settings in self.metrics:
            if EXPECTED_OUTPUT in metric.fields:
                if not isinstance(expected, ExpectedOutput):
                    calls.append(_not_applicable(metric, expected or "no expected output: no dataset"))
                    continue
                targets = [
                    replace(t, expected_output=expected.text) for t in self.targets(settings, metric, trace, agent)
                ]
            else:
                targets = self.targets(settings, metric, trace, agent)
            calls.extend(self._judge_one(metric, agent, target, judge, usage) for target in targets)
        return list(await asyncio.gather(*calls)), usage

    def session_entries(self, turns: Sequence[AgentTrace]) -> tuple[Entry, ...]:
        """A session's `{steps}`: each turn's user message, its steps and its answer, numbered
        as one run (tool calls too), so what `fit` leaves out is named unambiguously."""
        entries: list[Entry] = []
        tool_calls = 0

        def said(who: str, turn: int, text: str) -> None:
            if text:  # a turn whose spans do not record it shows its steps only
                number = len(entries) + 1
                entries.append(Entry(number, ((f"{number}. {who} (turn {turn}): ", self.builder.redacted(text)),)))

        for turn, agent in enumerate(turns, 1):
            said("user", turn, agent.user_input)
            steps = self.builder.step_entries(agent.steps, len(entries), tool_calls)
            entries += steps
            tool_calls += sum(entry.tool_number is not None for entry in steps)
            said("answer", turn, agent.final_output)
        return tuple(entries)

    async def judge_session(self, turns: Sequence[SessionTurn], judge: Judge) -> tuple[list[MetricResult], Usage]:
        """Each `on: session` metric, one call each, over the session's turns."""
        usage = Usage()
        if not turns or not self.session_metric_names:
            return [], usage
        runs = tuple(turn.agent for turn in turns)
        target = Target(None, None, turns[0].attributes, runs)
        run = session_run(runs)
        metrics = [metric for metric, _ in self.metrics if metric.on == SESSION]
        calls = [self._judge_one(metric, run, target, judge, usage) for metric in metrics]
        return list(await asyncio.gather(*calls)), usage

    async def _judge_one(
        self, metric: UserMetric, agent: AgentTrace, target: Target, judge: Judge, usage: Usage
    ) -> MetricResult:
        def failed(exc: JudgeError) -> MetricResult:
            return MetricResult(
                name=metric.name,
                threshold=metric.threshold,
                error=str(exc) or exc.error_type,
                error_type=exc.error_type,
                span_id=target.span_id,
            )

        try:
            self.messages(metric, agent, target)  # fits, or fails before any call
        except JudgeError as exc:
            return failed(exc)
        schema = metric.schema()

        async def ask(trial: int) -> dict[str, Any]:
            try:
                reply = await judge.complete(self.messages(metric, agent, target, trial), schema, metric.name)
            except JudgeError as exc:
                usage.add_failed(exc)
                raise
            usage.add(reply)
            return reply.data

        run = await run_trials(ask, self.trials)
        verdicts, errors = [], list(run.errors)
        for answer in run.answers:
            try:
                verdicts.append(metric.verdict(answer))
            except JudgeError as exc:
                errors.append(exc)
        if not verdicts:
            return failed(errors[-1])
        score = median(v.score for v in verdicts)
        speaker = min(verdicts, key=lambda v: abs(v.score - score))
        metadata = {**speaker.metadata, "threshold": metric.threshold, "success": score >= metric.threshold}
        if run.requested > 1:
            metadata["trials"] = trials_metadata(run, [v.score for v in verdicts])
        return MetricResult(
            name=metric.name,
            score=score,
            threshold=metric.threshold,
            explanation=speaker.explanation or None,
            metadata=metadata,
            span_id=target.span_id,
        )


async def _not_applicable(metric: UserMetric, why: str) -> MetricResult:
    """Skipped, not failed: nothing to compare the trace with (the judge_metrics processor
    records `eval.<metric>.skipped`)."""
    return MetricResult(name=metric.name, threshold=metric.threshold, error=why, error_type=NOT_APPLICABLE)
