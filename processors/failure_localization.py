"""`failure_localization` processor: where a failed run went wrong, on which span, and why.

Runs on a trace that failed (a metric scored before it in the pipeline failed, or a span
has error status), or on every trace with `when: always`. It finds the errors the spans
state (`localization.evidence`), each with its span, a category of the failure taxonomy
(`localization/taxonomy.yaml`), an impact, a quote and a one-line explanation.

Written back where people look:
- on each blamed span, a `gen_ai.evaluation.result` event (and log record) with the
  category as its label and `eval.failure.category/.group/.impact/.evidence/.source`;
- on the root, the result: score = the share of the run's steps before the first error
  (1.0 when none was found), label = the first error's category (`none_found`), and
  `eval.failure_localization.span_ids` (the blamed spans in order), `.errors` and
  `.errors.<group>` counts.
Errors that need reading the run (a made-up fact, a misread tool result, a wrong tool)
need a judge: with a `judge` section that has an api_key or a base_url, the judge reads
the run as numbered steps, shown the evidence already found, under `max_input_tokens`
per call (`localization.judging`: the whole run at once when it fits, else `windows` or
`bisection`, as `long_runs` says). Its requests and tokens are counted as every judge
metric's (`eval.judge.*`, the judge's `budget`). Without a judge, or when the judge
fails or its budget is spent, the evidence stands alone and the explanation says so.

Per session, `breaking_turn` on the session's carrier (`localization.turns`): the turn
that broke it, the first failed turn the later ones did not recover from, with its first
error's category and span.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import CODE, Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.score_encoding import (
    BLAMED_SPAN_IDS,
    FAILURE_CATEGORY,
    FAILURE_EVIDENCE,
    FAILURE_GROUP,
    FAILURE_IMPACT,
    FAILURE_SOURCE,
    result_keys,
)
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.agent_trace import AgentTrace, SpanViews, agent_trace_of, span_views_of
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.judge_metrics.base import Judge
from spanscore.processors.judge_metrics.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge_metrics.config import JudgeSection, build_judge, judge_configured
from spanscore.processors.judge_metrics.planner import DEFAULT_MAX_INPUT_TOKENS
from spanscore.processors.localization import judging, run_steps, turns
from spanscore.processors.localization.blame import EVIDENCE_SOURCE, NONE_FOUND, Blame
from spanscore.processors.localization.evidence import enclosing_call, find_evidence
from spanscore.processors.localization.judging import Judged, Localizer, LongRuns, TooLittleRoom
from spanscore.processors.localization.taxonomy import taxonomy

log = logging.getLogger("spanscore.failure_localization")

NAME = "failure_localization"
KEYS = result_keys(NAME)
NO_JUDGE = "evidence only: no judge configured, so errors that need reading the run were not looked for"
JUDGE_EVALUATOR = "judge"  # its spend is counted with the judge metrics': eval.judge.*
DEFAULT_MAX_FIELD_CHARS = 1_000


class FailureLocalizationConfig(ComponentConfig):
    enabled: bool = True
    when: Literal["failed", "always"] = "failed"
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    max_errors: int = Field(default=20, ge=1, le=1000)  # blamed spans written per trace, the first ones
    judge: JudgeSection = None
    long_runs: LongRuns = "windows"  # a run longer than one call: windows of steps, or bisection
    max_field_chars: int = Field(default=DEFAULT_MAX_FIELD_CHARS, ge=100)
    max_input_tokens: int = Field(default=DEFAULT_MAX_INPUT_TOKENS, ge=1)
    session_turns: bool = True  # breaking_turn: which turn of a session broke it

    @field_validator("max_input_tokens")
    @classmethod
    def _room_for_steps(cls, value: int) -> int:
        try:
            judging.check_room(value)
        except TooLittleRoom as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def configured(self) -> bool:
        return judge_configured(self.judge)


class FailureLocalization(Processor):
    def __init__(self, component_id: str, config: FailureLocalizationConfig):
        self.id = component_id
        self.config = config
        if not config.enabled:
            self.metric_names: tuple[str, ...] = ()
        else:
            self.metric_names = (NAME, turns.NAME) if config.session_turns else (NAME,)
        self.judge: Judge | None = None
        self.localizer: Localizer | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if self.config.enabled and judge_configured(self.config.judge):
            self.judge = build_judge(self.config.judge)
            self.localizer = Localizer(
                self.judge, self.config.long_runs, self.config.max_input_tokens, self.config.max_field_chars
            )
        elif self.config.enabled:
            log.info("%s: no judge configured; errors are found from what the spans state only", self.id)

    def judges(self) -> tuple[Judge, ...]:
        return () if self.judge is None else (self.judge,)

    async def shutdown(self, deadline: float) -> None:
        judge, self.judge, self.localizer = self.judge, None, None
        if judge is not None:
            await judge.close()

    def provenance(self, metric_name: str) -> Provenance:
        if metric_name == turns.NAME:  # arithmetic over the turns' verdicts and blames
            return Provenance(CODE, revision_of(turns.NAME, inspect.getsource(turns), self.config.threshold))
        categories = sorted((c.id, c.group, c.description) for c in taxonomy().categories.values())
        settings = self.config.model_dump(exclude={"judge"})
        if not judge_configured(self.config.judge):  # the evidence rules: code, as every metric without a model
            return Provenance(CODE, revision_of(NAME, EVIDENCE_SOURCE, settings, categories))
        model = self.config.judge.model
        prompts = (inspect.getsource(judging), inspect.getsource(run_steps))
        return Provenance(model, revision_of(NAME, model, settings, categories, prompts), judged=True)

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return (turns.NAME,) if turns.NAME in self.metric_names else ()

    @property
    def uses_sessions(self) -> bool:
        return bool(self.session_metric_names)

    async def process_session(self, session: Session) -> list[MetricResult | SpanAttribute]:
        if not self.session_metric_names:
            return []
        return turns.session_outputs(session.state.get(self.id, []), self.config.threshold)

    async def process_trace(self, trace: Trace, session: Session | None) -> list[TraceOutput]:
        if not self.config.enabled:
            return []
        views = span_views_of(trace)
        if views is None:
            return []
        why = _why_failed(trace, views)
        if why is None and self.config.when == "failed":
            outputs: list[TraceOutput] = []
        else:
            outputs = await self._localize(trace, views, why)
        if session is not None and self.session_metric_names:
            first = next((o for o in outputs if isinstance(o, SpanFinding)), None)
            session.state.setdefault(self.id, []).append(
                turns.Turn(
                    trace.trace_id_hex,
                    why,
                    first.label if first else None,
                    first.span_id.hex() if first else None,
                )
            )
        return outputs

    async def _localize(self, trace: Trace, views: SpanViews, why: str | None) -> list[TraceOutput]:
        run = agent_trace_of(trace)
        evidence = find_evidence(views, run)
        outputs: list[TraceOutput] = []
        judged = None
        if self.localizer is not None and run.steps:
            judged = await self.localizer.localize(run, evidence)
            usage = judged.usage
            if judged.requests or usage.calls:
                outputs.append(EvaluatorUsage(JUDGE_EVALUATOR, usage.calls, usage.input_tokens, usage.output_tokens))
        blames = _merged(evidence, judged.blames if judged else [], views)[: self.config.max_errors]
        source = self._source(judged, len(run_steps.run_steps(run)))
        return [
            self._result(run, views, blames, why, source),
            *self._summary(blames),
            *(_finding(b) for b in blames),
            *outputs,
        ]

    def _source(self, judged: Judged | None, steps: int) -> str:
        """What looked for the errors, for the explanation."""
        judge = self.config.judge  # the localizer's, set when there is one
        if self.localizer is None or judge is None:
            return NO_JUDGE
        if judged is None:
            return "no steps for the judge to read; evidence only"
        requests = f"{judged.requests} request{'s' if judged.requests != 1 else ''}"
        how = f"{requests}, {judged.steps_read} of {steps} steps read"
        text = f"judged by {judge.model} ({self.config.long_runs} when long; {how})"
        if judged.stopped is not None:
            if judged.stopped.error_type == BUDGET_EXHAUSTED:
                text += "; the judge's budget is spent, the rest is evidence only"
            else:
                text += f"; the judge stopped ({judged.stopped.error_type}: {excerpt(str(judged.stopped), 160)})"
        return text

    def _result(
        self, run: AgentTrace, views: SpanViews, blames: list[Blame], why: str | None, source: str
    ) -> MetricResult:
        failed = f"the run failed ({why})" if why else "the run did not fail"
        if not blames:
            found = "no span states an error" if self.localizer is None else "no error found"
            return MetricResult(
                name=NAME,
                score=1.0,
                threshold=self.config.threshold,
                class_label=NONE_FOUND,
                explanation=f"{failed}; {found}; {source}",
            )
        first = blames[0]
        steps = sorted(step.start_time_unix_nano for step in run.steps if step.from_span)
        at = _step_start(first.span_id, views)
        before = sum(1 for start in steps if start < at)
        score = before / len(steps) if steps else 0.0
        groups = Counter(taxonomy()[b.category].group for b in blames)
        counted = ", ".join(f"{n} {group.replace('_', ' ')}" for group, n in groups.most_common())
        where = views.by_id[first.span_id].name if first.span_id in views.by_id else "?"
        explanation = (
            f"{failed}; first error at step {before + 1} of {len(steps)}, span {first.span_id} "
            f"({excerpt(where, 60)}): {first.category}: {first.explanation}; "
            f"{len(blames)} error{'s' if len(blames) != 1 else ''} ({counted}); {source}"
        )
        return MetricResult(
            name=NAME,
            score=min(1.0, score),
            threshold=self.config.threshold,
            class_label=first.category,
            explanation=explanation,
        )

    @staticmethod
    def _summary(blames: list[Blame]) -> list[SpanAttribute]:
        groups = Counter(taxonomy()[b.category].group for b in blames)
        attributes = [SpanAttribute(KEYS.field("errors"), len(blames))]
        attributes += [SpanAttribute(KEYS.field(f"errors.{group}"), groups[group]) for group in taxonomy().groups]
        if blames:
            ordered = list(dict.fromkeys(b.span_id for b in blames))
            attributes.append(SpanAttribute(BLAMED_SPAN_IDS, ",".join(ordered)))
        return attributes


def _step_start(span_id: str, views: SpanViews) -> int:
    """When the step the span belongs to started: its own start, or that of the tool or
    model call it is part of (an HTTP call under a tool is in that tool's step)."""
    view = views.by_id.get(span_id)
    if view is None:
        return 0
    call = enclosing_call(view, views)
    return (call or view).start


def _merged(evidence: Sequence[Blame], judged: Sequence[Blame], views: SpanViews) -> list[Blame]:
    """Evidence and the judge's errors in run order, one per (span, category); the
    evidence's wins a tie, as it quotes what the span states."""
    seen: set[tuple[str, str]] = set()
    merged = []
    for blame in [*evidence, *judged]:
        if (blame.span_id, blame.category) not in seen and blame.span_id in views.by_id:
            seen.add((blame.span_id, blame.category))
            merged.append(blame)
    order = {view.span_id: (view.start, view.depth) for view in views.views}
    return sorted(merged, key=lambda blame: order[blame.span_id])


def _why_failed(trace: Trace, views: SpanViews) -> str | None:
    """What says the run failed: a metric scored before this one, or a span's error status."""
    for result in trace.results:
        if result.name != NAME and result.passed is False:
            return f"{result.name} {result.score:.2f} < {result.threshold:.2f}"
    failed = [view for view in views.views if view.error is not None]
    if failed:
        return f"{len(failed)} span{'s' if len(failed) != 1 else ''} with error status"
    return None


def _finding(blame: Blame) -> SpanFinding:
    return SpanFinding(
        span_id=bytes.fromhex(blame.span_id),
        name=NAME,
        label=blame.category,
        explanation=blame.explanation,
        attributes=(
            (FAILURE_CATEGORY, blame.category),
            (FAILURE_GROUP, taxonomy()[blame.category].group),
            (FAILURE_IMPACT, blame.impact),
            (FAILURE_EVIDENCE, blame.evidence),
            (FAILURE_SOURCE, blame.source),
        ),
    )


FACTORY = ComponentFactory("processor", NAME, FailureLocalizationConfig, FailureLocalization)
