"""Which judge calls one trace needs for the enabled LLM-judge metrics, and their results.

Taken stage by stage (docs/metrics.md, Judge calls), the seven metrics cost 16 calls
per trace. The plan cuts that down:
- facts the trace holds (user input, tools called, tools available) are read from the
  `AgentTrace`, never asked of the judge;
- task, outcome and plan are extracted in one call per trace, shared by every metric
  that reads them, and skipped when no enabled metric does;
- `per_metric` then makes one scoring call per metric that needs the judge (at most
  1 + 7 = 8 calls), `combined` one call scoring every such metric (at most 2 calls).
  `per_metric` asks a small judge simpler questions; `combined` sends the trace once
  more instead of seven times. In `combined`, the trace metrics of the user's own
  (`joined`) are scored in that same call, each under its own key; the fields their
  prompts name that the trace block does not show (retrieved documents, attributes)
  are added to the block (`judge_trace(joined_data=...)`).
With `trials: N` every scoring call runs N times (extraction still once: it gathers
the facts the judgments are about, it is not itself a judgment).

Every call of a trace fits `max_input_tokens` (as `token_estimate` estimates it): the
data block, shared by all of them, gets what the largest call leaves after its system
message, instructions, answer schema and, for the calls that carry one, the room kept
for the extracted block (`EXTRACTED_TOKENS`); `trace_view` fits the block into it.

A JudgeError fails only the metrics that depended on the failed call: an extraction
failure fails task_completion, step_efficiency and the plan metrics; the others are
still scored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from spanscore.core.redaction import Redaction
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.judge_metrics.base import Judge, JudgeError, JudgeReply
from spanscore.processors.judge_metrics.prompts import (
    DEFAULT_MAX_FIELD_CHARS,
    Layout,
    Line,
    PromptBuilder,
    prompt_tokens,
)
from spanscore.processors.judge_metrics.rubrics import (
    METRIC_NAMES,
    NOT_APPLICABLE,
    RUBRICS,
    Extraction,
    Judgment,
    Rubric,
    TraceFacts,
    combined_instructions,
    combined_schema,
    metric_instructions,
)
from spanscore.processors.judge_metrics.trace_view import Coverage, DoesNotFit, View, fit
from spanscore.processors.judge_metrics.trials import TrialRun, run_trials, validate_trials

Mode = Literal["per_metric", "combined"]
MODES: tuple[str, ...] = ("per_metric", "combined")
COMBINED_SCHEMA_NAME = "combined"

# A context window most judge models have, with room to spare for the answer; at most 8
# calls per trace (per_metric) bound a trace's input tokens to 8 x this.
DEFAULT_MAX_INPUT_TOKENS = 32_000
# Room kept in a scoring call for what extraction found (task, outcome, plan): the block
# is cut to fit it, as the trace is, so the data block can be laid out before extraction
# answers and shared by every call of the trace.
EXTRACTED_TOKENS = 1_500
# The least room the trace must have beside the largest call's instructions, checked
# when the plan is made: less would show the judge next to nothing of any trace.
MIN_DATA_TOKENS = 1_000
INPUT_TOO_LARGE = "input_too_large"  # error.type of the results of a trace that cannot fit


class TooLittleRoom(ValueError):
    """`max_input_tokens` leaves the trace too little room beside the plan's own text."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(f"max_input_tokens: {problem}")


@dataclass
class Usage:
    """What the judge spent on one trace. `calls` counts HTTP requests (retries included,
    cache hits excluded), as `JudgeReply.calls` does."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached: int = 0

    def add(self, reply: JudgeReply) -> None:
        """What one answer cost: its requests and tokens, or one cached answer."""
        self.calls += reply.calls
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        self.cached += int(reply.cached)

    def add_failed(self, error: JudgeError) -> None:
        """The requests a call spent before it gave up."""
        self.calls += error.calls

    def as_dict(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached": self.cached,
        }


@dataclass(frozen=True)
class JudgePlan:
    """The LLM-judge metrics to run on each trace and how.

    `metrics`: names from `METRIC_NAMES`, results come back in this order, then those of
    `joined`: rubrics of metrics of the user's own scored in the combined call
    (`combined` mode only), their instructions holding their own worked examples.
    `thresholds`: per metric, default 0.5. `trials`: odd; `early_stop` ends trials once
    the remaining ones cannot change any majority. `redact`: a `Redaction` or the
    `redact:` setting (None: the built-in secret shapes). `max_field_chars`: longer trace fields are truncated.

    Threading: immutable; `run` may be awaited concurrently for different traces.
    """

    metrics: Sequence[str] = METRIC_NAMES
    mode: Mode = "per_metric"
    thresholds: Mapping[str, float] = field(default_factory=dict)
    trials: int = 1
    early_stop: bool = False
    redact: Redaction | Mapping[str, Any] | bool | None = None
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS
    examples: Mapping[str, str] = field(default_factory=dict)
    joined: Sequence[Rubric] = ()

    def __post_init__(self) -> None:
        metrics = tuple(self.metrics)
        unknown = [m for m in metrics if m not in RUBRICS]
        if unknown:
            raise ValueError(f"metrics: unknown judge metrics {unknown} (known: {list(METRIC_NAMES)})")
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metrics: listed twice in {list(metrics)}")
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {list(MODES)}, got {self.mode!r}")
        joined = tuple(self.joined)
        if joined and self.mode != "combined":
            raise ValueError("joined: metrics of your own join the combined call only, in mode combined")
        clashing = [r.name for r in joined if r.name in RUBRICS]
        if clashing or len({r.name for r in joined}) != len(joined):
            raise ValueError(f"joined: names must be new and distinct, got {[r.name for r in joined]}")
        object.__setattr__(self, "joined", joined)
        for name, threshold in self.thresholds.items():
            if name not in RUBRICS and name not in self.names:
                raise ValueError(f"thresholds: unknown judge metric {name!r}")
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
                raise ValueError(f"thresholds.{name}: must be a number within [0, 1], got {threshold!r}")
        unknown = sorted(set(self.examples) - set(RUBRICS))
        if unknown:
            raise ValueError(f"examples: unknown judge metrics {unknown}")
        validate_trials(self.trials)
        if self.max_field_chars < 1:
            raise ValueError(f"max_field_chars: must be >= 1, got {self.max_field_chars}")
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "thresholds", dict(self.thresholds))
        object.__setattr__(self, "examples", dict(self.examples))
        object.__setattr__(self, "redact", Redaction.from_config(self.redact))
        problem = self.room_problem()
        if problem:
            raise TooLittleRoom(problem)

    @property
    def names(self) -> tuple[str, ...]:
        """Every metric the plan scores, in result order."""
        return (*self.metrics, *(r.name for r in self.joined))

    @property
    def rubrics(self) -> list[Rubric]:
        return [*(RUBRICS[m] for m in self.metrics), *self.joined]

    def threshold(self, name: str) -> float:
        return float(self.thresholds.get(name, DEFAULT_THRESHOLD))

    def max_calls(self) -> int:
        """Upper bound on judge requests per trace, retries aside."""
        rubrics = self.rubrics
        extraction = 1 if any(r.needs for r in rubrics) else 0
        scoring = len(rubrics) if self.mode == "per_metric" else min(1, len(rubrics))
        return extraction + self.trials * scoring

    @property
    def redaction(self) -> Redaction:
        """`redact`, which `__post_init__` made a `Redaction` (handed back as it is)."""
        return Redaction.from_config(self.redact)

    def builder(self) -> PromptBuilder:
        return PromptBuilder(self.redaction, self.max_field_chars)

    def calls(self, facts: TraceFacts) -> list[tuple[str, str, dict[str, Any], bool]]:
        """Every call the plan may send for a trace with these facts: (schema name,
        instructions, schema, whether it carries the extracted block). Calls that the
        trace's answers settle without the judge are listed too."""
        rubrics = self.rubrics
        needs = frozenset().union(*(r.needs for r in rubrics))
        calls = []
        if needs:
            fields = Extraction.fields(needs)
            calls.append((Extraction.schema_name, Extraction.instructions(fields), Extraction.schema(fields), False))
        if self.mode == "per_metric":
            calls.extend((r.name, self.instructions(r, facts), r.schema(facts), bool(r.needs)) for r in rubrics)
        elif rubrics:
            instructions = combined_instructions(rubrics, facts, self.examples)
            calls.append((COMBINED_SCHEMA_NAME, instructions, combined_schema(rubrics, facts), bool(needs)))
        return calls

    def instructions(self, rubric: Rubric, facts: TraceFacts) -> str:
        """A metric's own call's instructions: its worked examples, then its rubric."""
        return metric_instructions(rubric, facts, self.examples)

    def largest_call(self, facts: TraceFacts) -> tuple[str, int]:
        """The call that leaves the trace the least room, and its estimated tokens besides
        the data block: system message, instructions, schema, the extracted block's room
        and the last trial's suffix."""
        builder = self.builder()
        largest = ("", 0)
        for name, instructions, schema, extracted in self.calls(facts):
            tokens = prompt_tokens(builder.messages("", instructions, trial=self.trials - 1), schema)
            if extracted:
                tokens += EXTRACTED_TOKENS + 1  # the block, and the blank line before it
            largest = max(largest, (name, tokens), key=lambda call: call[1])
        return largest

    def room_problem(self) -> str | None:
        """Why `max_input_tokens` is too small for the plan's own text, or None. Checked on
        a trace with one tool call; a trace's own tool count changes a few digits."""
        facts = TraceFacts(user_input="", tools_called=[{"name": "", "parameters": None}], available_tools=[])
        name, tokens = self.largest_call(facts)
        if self.max_input_tokens - tokens >= MIN_DATA_TOKENS:
            return None
        return (
            f"{self.max_input_tokens:,} leaves the trace too little room: the {name} call takes about "
            f"{tokens:,} tokens without it and the trace needs at least {MIN_DATA_TOKENS:,}; "
            f"set at least {tokens + MIN_DATA_TOKENS:,}"
        )

    def view(self, trace: AgentTrace, facts: TraceFacts | None = None, joined_data: Sequence[Line] = ()) -> View:
        """The data block every call of `trace` carries, fit to the room the largest call
        leaves, and how much of the trace it shows. `joined_data`: lines the joined
        metrics read, put last in the block. Raises DoesNotFit."""
        facts = facts or TraceFacts.from_trace(trace, self.redaction)
        _, overhead = self.largest_call(facts)
        layout = self.builder().trace_layout(trace)
        if joined_data:  # before the block's closing delimiter
            layout = Layout(layout.head, layout.entries, (*layout.tail[:-1], *joined_data, layout.tail[-1]))
        return fit(layout, self.max_field_chars, self.max_input_tokens - overhead)

    async def run(self, trace: AgentTrace, judge: Judge) -> tuple[list[MetricResult], dict[str, int]]:
        """One result per enabled metric, in `names` order, and the judge usage."""
        judged = await self.judge_trace(trace, judge)
        return judged.results, judged.usage

    async def judge_trace(self, trace: AgentTrace, judge: Judge, joined_data: Sequence[Line] = ()) -> Judged:
        """`run`'s results and usage, and how much of the trace the judge saw."""
        job = _TraceJob(self, trace, judge, joined_data)
        await job.run()
        return Judged([job.results[name] for name in self.names], job.usage.as_dict(), job.coverage)


@dataclass(frozen=True)
class Judged:
    """A trace's judge results and usage; `coverage` is None when the trace did not fit."""

    results: list[MetricResult]
    usage: dict[str, int]
    coverage: Coverage | None


def judge_view(
    trace: AgentTrace,
    redaction: Redaction | Mapping[str, Any] | bool | None = None,
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
    *,
    metrics: Sequence[str] = METRIC_NAMES,
    mode: Mode = "per_metric",
) -> tuple[str, Coverage]:
    """The data block the judge is shown of `trace`, and how much of the trace it holds,
    with these settings (by default the `judge_metrics` processor's: every metric, in
    `per_metric` mode). Raises DoesNotFit when the trace cannot fit at all."""
    plan = JudgePlan(
        metrics=metrics, mode=mode, redact=redaction, max_field_chars=max_field_chars, max_input_tokens=max_input_tokens
    )
    view = plan.view(trace)
    return view.text, view.coverage


class _TraceJob:
    """The calls for one trace; holds what they share (data block, facts, usage)."""

    def __init__(self, plan: JudgePlan, trace: AgentTrace, judge: Judge, joined_data: Sequence[Line] = ()):
        self.plan = plan
        self.judge = judge
        self.builder = plan.builder()
        self.facts = TraceFacts.from_trace(trace, plan.redaction)
        self.data_block = ""
        self.coverage: Coverage | None = None
        self.too_large = ""
        try:
            view = plan.view(trace, self.facts, joined_data)
            self.data_block, self.coverage = view.text, view.coverage
        except DoesNotFit as exc:
            self.too_large = f"the trace does not fit max_input_tokens ({plan.max_input_tokens:,}): {exc}"
        self.usage = Usage()
        self.results: dict[str, MetricResult] = {}

    async def run(self) -> None:
        pending = [r for r in self.plan.rubrics if not self._settled_without_judge(r, self.facts)]
        if self.too_large:
            for rubric in pending:
                self.results[rubric.name] = self._failure(rubric, JudgeError(self.too_large, INPUT_TOO_LARGE))
            return
        independent = [r for r in pending if not r.needs]
        dependent = [r for r in pending if r.needs]
        if self.plan.mode == "per_metric":
            await asyncio.gather(self._extract_then_score(dependent), self._score_each(independent, self.facts))
            return
        facts, ready = await self._extract(dependent)
        # Metrics that read nothing extracted are scored even when extraction failed.
        order = {name: i for i, name in enumerate(self.plan.names)}
        await self._score_combined(sorted(independent + ready, key=lambda r: order[r.name]), facts)

    def _settled_without_judge(self, rubric: Rubric, facts: TraceFacts) -> bool:
        """Records a metric the trace gives nothing to judge as skipped: a result with no
        score whose error says why, `error_type` NOT_APPLICABLE."""
        if rubric.needs and not facts.extracted:
            return False
        why = rubric.skip(facts)
        if why is None:
            return False
        threshold = self.plan.threshold(rubric.name)
        self.results[rubric.name] = MetricResult(
            name=rubric.name, threshold=threshold, error=why, error_type=NOT_APPLICABLE
        )
        return True

    async def _ask(
        self, instructions: str, schema: dict[str, Any], schema_name: str, extracted: str = "", trial: int = 0
    ) -> dict[str, Any]:
        messages = self.builder.messages(self.data_block, instructions, extracted=extracted, trial=trial)
        try:
            reply = await self.judge.complete(messages, schema, schema_name)
        except JudgeError as exc:
            self.usage.add_failed(exc)
            raise
        self.usage.add(reply)
        return reply.data

    async def _extract(self, dependent: list[Rubric]) -> tuple[TraceFacts, list[Rubric]]:
        """One extraction call for all `dependent` metrics; returns the facts with what was
        extracted and the metrics still to score (no plan found settles the plan metrics)."""
        if not dependent:
            return self.facts, []
        fields = Extraction.fields(frozenset().union(*(r.needs for r in dependent)))
        try:
            answer = await self._ask(Extraction.instructions(fields), Extraction.schema(fields), Extraction.schema_name)
            extracted = Extraction.parse(answer, fields)
        except JudgeError as exc:
            for rubric in dependent:
                self.results[rubric.name] = self._failure(rubric, exc)
            return self.facts, []
        facts = self.facts.with_extracted(extracted)
        return facts, [r for r in dependent if not self._settled_without_judge(r, facts)]

    async def _extract_then_score(self, dependent: list[Rubric]) -> None:
        facts, ready = await self._extract(dependent)
        await self._score_each(ready, facts)

    async def _score_each(self, rubrics: list[Rubric], facts: TraceFacts) -> None:
        await asyncio.gather(*(self._score_one(rubric, facts) for rubric in rubrics))

    async def _score_one(self, rubric: Rubric, facts: TraceFacts) -> None:
        extracted = self._extracted_block([rubric], facts)
        instructions, schema = self.plan.instructions(rubric, facts), rubric.schema(facts)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(instructions, schema, rubric.name, extracted, trial)

        run = await self._trials(ask, [rubric], facts, lambda _name, answer: answer)
        self._shape(rubric, facts, run, lambda answer: answer)

    async def _score_combined(self, rubrics: list[Rubric], facts: TraceFacts) -> None:
        if not rubrics:
            return
        extracted = self._extracted_block(rubrics, facts)
        instructions = combined_instructions(rubrics, facts, self.plan.examples)
        schema = combined_schema(rubrics, facts)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(instructions, schema, COMBINED_SCHEMA_NAME, extracted, trial)

        run = await self._trials(ask, rubrics, facts, _part)
        for rubric in rubrics:
            self._shape(rubric, facts, run, lambda answer, name=rubric.name: _part(name, answer))

    def _extracted_block(self, rubrics: Sequence[Rubric], facts: TraceFacts) -> str:
        fields = Extraction.fields(frozenset().union(*(r.needs for r in rubrics)))
        if not fields:
            return ""
        layout = self.builder.extracted_layout(facts.extracted, fields)
        return fit(layout, self.plan.max_field_chars, EXTRACTED_TOKENS).text

    async def _trials(
        self, ask: Callable[[int], Any], rubrics: Sequence[Rubric], facts: TraceFacts, part: Callable[[Any, Any], Any]
    ) -> TrialRun:
        def votes(answer: dict[str, Any]) -> dict[str, bool]:
            ballot: dict[str, bool] = {}
            for rubric in rubrics:
                try:
                    judgment = rubric.parse(part(rubric.name, answer), facts)
                except JudgeError:
                    continue  # a malformed answer votes on nothing
                ballot.update(rubric.votes(judgment, self.plan.threshold(rubric.name)))
            return ballot

        return await run_trials(ask, self.plan.trials, votes=votes, early_stop=self.plan.early_stop)

    def _shape(self, rubric: Rubric, facts: TraceFacts, run: TrialRun, part: Callable[[Any], Any]) -> None:
        """The rubric's result from the trials' valid answers; a failure when none is valid."""
        valid = TrialRun(requested=run.requested, errors=list(run.errors))
        judgments: list[Judgment] = []
        for answer in run.answers:
            try:
                judgments.append(rubric.parse(part(answer), facts))
            except JudgeError as exc:
                valid.errors.append(exc)  # counted as a failed trial for this metric
            else:
                valid.answers.append(answer)
        if not judgments:
            self.results[rubric.name] = self._failure(rubric, valid.errors[-1])
            return
        self.results[rubric.name] = rubric.result(facts, judgments, self.plan.threshold(rubric.name), valid)

    def _failure(self, rubric: Rubric, exc: JudgeError) -> MetricResult:
        return MetricResult(
            name=rubric.name,
            threshold=self.plan.threshold(rubric.name),
            error=str(exc) or exc.error_type,
            error_type=exc.error_type,
        )


def _part(name: str, answer: Any) -> Any:
    """One metric's answer inside a combined answer."""
    return answer.get(name) if isinstance(answer, Mapping) else None
