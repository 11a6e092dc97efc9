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
  more instead of seven times.
With `trials: N` every scoring call runs N times (extraction still once: it gathers
the facts the judgments are about, it is not itself a judgment).

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
from spanscore.processors.judge.base import Judge, JudgeError
from spanscore.processors.judge.prompts import DEFAULT_MAX_FIELD_CHARS, PromptBuilder
from spanscore.processors.judge.rubrics import (
    METRIC_NAMES,
    RUBRICS,
    Extraction,
    Judgment,
    Rubric,
    TraceFacts,
    combined_instructions,
    combined_schema,
)
from spanscore.processors.judge.trials import TrialRun, run_trials, validate_trials

Mode = Literal["per_metric", "combined"]
MODES: tuple[str, ...] = ("per_metric", "combined")
COMBINED_SCHEMA_NAME = "combined"


@dataclass
class Usage:
    """What the judge spent on one trace. `calls` counts HTTP requests (retries included,
    cache hits excluded), as `JudgeReply.calls` does."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached: int = 0

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

    `metrics`: names from `METRIC_NAMES`, results come back in this order.
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

    def __post_init__(self) -> None:
        metrics = tuple(self.metrics)
        unknown = [m for m in metrics if m not in RUBRICS]
        if unknown:
            raise ValueError(f"metrics: unknown judge metrics {unknown} (known: {list(METRIC_NAMES)})")
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"metrics: listed twice in {list(metrics)}")
        if self.mode not in MODES:
            raise ValueError(f"mode: expected one of {list(MODES)}, got {self.mode!r}")
        for name, threshold in self.thresholds.items():
            if name not in RUBRICS:
                raise ValueError(f"thresholds: unknown judge metric {name!r}")
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
                raise ValueError(f"thresholds.{name}: must be a number within [0, 1], got {threshold!r}")
        validate_trials(self.trials)
        if self.max_field_chars < 1:
            raise ValueError(f"max_field_chars: must be >= 1, got {self.max_field_chars}")
        object.__setattr__(self, "metrics", metrics)
        object.__setattr__(self, "thresholds", dict(self.thresholds))
        object.__setattr__(self, "redact", Redaction.from_config(self.redact))

    def threshold(self, name: str) -> float:
        return float(self.thresholds.get(name, DEFAULT_THRESHOLD))

    def max_calls(self) -> int:
        """Upper bound on judge requests per trace, retries aside."""
        rubrics = [RUBRICS[m] for m in self.metrics]
        extraction = 1 if any(r.needs for r in rubrics) else 0
        scoring = len(rubrics) if self.mode == "per_metric" else min(1, len(rubrics))
        return extraction + self.trials * scoring

    async def run(self, trace: AgentTrace, judge: Judge) -> tuple[list[MetricResult], dict[str, int]]:
        """One result per enabled metric, in `metrics` order, and the judge usage."""
        job = _TraceJob(self, trace, judge)
        await job.run()
        return [job.results[name] for name in self.metrics], job.usage.as_dict()


class _TraceJob:
    """The calls for one trace; holds what they share (data block, facts, usage)."""

    def __init__(self, plan: JudgePlan, trace: AgentTrace, judge: Judge):
        self.plan = plan
        self.judge = judge
        self.builder = PromptBuilder(plan.redact, plan.max_field_chars)
        self.data_block = self.builder.data_block(trace)
        self.facts = TraceFacts.from_trace(trace, plan.redact)
        self.usage = Usage()
        self.results: dict[str, MetricResult] = {}

    async def run(self) -> None:
        pending = [r for r in (RUBRICS[m] for m in self.plan.metrics) if not self._settled_without_judge(r, self.facts)]
        independent = [r for r in pending if not r.needs]
        dependent = [r for r in pending if r.needs]
        if self.plan.mode == "per_metric":
            await asyncio.gather(self._extract_then_score(dependent), self._score_each(independent, self.facts))
            return
        facts, ready = await self._extract(dependent)
        # Metrics that read nothing extracted are scored even when extraction failed.
        order = {name: i for i, name in enumerate(self.plan.metrics)}
        await self._score_combined(sorted(independent + ready, key=lambda r: order[r.name]), facts)

    def _settled_without_judge(self, rubric: Rubric, facts: TraceFacts) -> bool:
        """Records the result of a metric the trace leaves nothing to judge for."""
        if rubric.needs and not facts.extracted:
            return False
        skipped = rubric.skip(facts)
        if skipped is None:
            return False
        score, explanation = skipped
        self.results[rubric.name] = rubric.skipped_result(facts, score, explanation, self.plan.threshold(rubric.name))
        return True

    async def _ask(
        self, instructions: str, schema: dict[str, Any], schema_name: str, extracted: str = "", trial: int = 0
    ) -> dict[str, Any]:
        messages = self.builder.messages(self.data_block, instructions, extracted=extracted, trial=trial)
        try:
            reply = await self.judge.complete(messages, schema, schema_name)
        except JudgeError as exc:
            self.usage.calls += exc.calls  # requests spent before giving up count too
            raise
        self.usage.calls += reply.calls
        self.usage.input_tokens += reply.input_tokens
        self.usage.output_tokens += reply.output_tokens
        self.usage.cached += int(reply.cached)
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
        instructions, schema = rubric.instructions(facts), rubric.schema(facts)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(instructions, schema, rubric.name, extracted, trial)

        run = await self._trials(ask, [rubric], facts, lambda _name, answer: answer)
        self._shape(rubric, facts, run, lambda answer: answer)

    async def _score_combined(self, rubrics: list[Rubric], facts: TraceFacts) -> None:
        if not rubrics:
            return
        extracted = self._extracted_block(rubrics, facts)
        instructions = combined_instructions(rubrics, facts)
        schema = combined_schema(rubrics, facts)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(instructions, schema, COMBINED_SCHEMA_NAME, extracted, trial)

        run = await self._trials(ask, rubrics, facts, _part)
        for rubric in rubrics:
            self._shape(rubric, facts, run, lambda answer, name=rubric.name: _part(name, answer))

    def _extracted_block(self, rubrics: Sequence[Rubric], facts: TraceFacts) -> str:
        fields = Extraction.fields(frozenset().union(*(r.needs for r in rubrics)))
        return self.builder.extracted_block(facts.extracted, fields) if fields else ""

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
