"""`judge_metrics` processor: the seven LLM-as-judge trace metrics.

task_completion, tool_correctness, argument_correctness, step_efficiency, confidence,
plan_adherence and plan_quality, judged by any OpenAI-compatible server (see
`processors/judge/planner.py` for how calls are shared: at most 8 per trace in
`per_metric` mode, 2 in `combined`). `confidence` and `tool_correctness` also become
the session metrics' signals. What the judge spent goes on the root span
(`eval.judge.*`) and into the score metrics.

With no judge configured (no `judge` section, or one with neither `api_key` nor
`base_url`, as the default config has when OPENAI_API_KEY is unset) the metrics are not
run, and the startup log says so once.

Nothing to judge is not a score: a trace whose spans hold neither the user's input nor
the agent's final output (instrumentation that records spans but not message content)
gets an error result per metric, `no_content`, without asking the judge, which would
otherwise grade an empty transcript and return a confident, meaningless number.

Past the judge's `budget`, a metric is skipped, not failed: it gets no result (no score,
no error, nothing counted in the score metrics), only `eval.<metric>.skipped` on the
span saying why. A judge outage longer than `max_judge_wait` is a failure: the metric's
error says how long the judge was unreachable and why.
"""

from __future__ import annotations

import inspect
import logging
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.once import FirstSeen
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import RedactConfig
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.sampling import trace_id_sampled
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.judge.base import Judge
from spanscore.processors.judge.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge.config import (
    JudgeSection,
    JudgeTrials,
    build_judge,
    judge_configured,
)
from spanscore.processors.judge.planner import DEFAULT_MAX_INPUT_TOKENS, JudgePlan, TooLittleRoom
from spanscore.processors.judge.prompts import DEFAULT_MAX_FIELD_CHARS
from spanscore.processors.judge.rubrics import METRIC_NAMES, RUBRICS

log = logging.getLogger("spanscore.judge_metrics")

JUDGE_EVALUATOR = "judge"  # eval.judge.* on the span, gen_ai.evaluation.judge.* metrics
NO_CONTENT = "no_content"  # error.type of the results for a trace with nothing to judge
# The share of the trace's text the judge was shown, after field limits and max_input_tokens.
INPUT_SHARE = f"eval.{JUDGE_EVALUATOR}.input_share"


class JudgeMetricSettings(ComponentConfig):
    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


class JudgeMetricsConfig(ComponentConfig):
    judge: JudgeSection = None
    mode: Literal["per_metric", "combined"] = "per_metric"
    metrics: dict[str, JudgeMetricSettings] = Field(default_factory=dict)
    # Share of traces judged, chosen by trace id as the TraceIdRatioBased sampler does,
    # so the same traces are judged on every replica; the rest get no judge results.
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    trials: JudgeTrials = 1
    early_stop: bool = True
    redact: RedactConfig = Field(default_factory=RedactConfig)
    max_field_chars: int = Field(default=DEFAULT_MAX_FIELD_CHARS, ge=100)
    max_input_tokens: int = Field(default=DEFAULT_MAX_INPUT_TOKENS, ge=1)

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, value: dict[str, JudgeMetricSettings]) -> dict[str, JudgeMetricSettings]:
        unknown = sorted(set(value) - set(METRIC_NAMES))
        if unknown:
            raise ValueError(f"unknown judge metrics {unknown}; known: {', '.join(METRIC_NAMES)}")
        return value

    @field_validator("max_input_tokens")
    @classmethod
    def _room_for_the_trace(cls, value: int, info: ValidationInfo) -> int:
        # Checked with the settings that make the calls, when they are valid themselves.
        if all(key in info.data for key in ("mode", "metrics", "trials")):
            settings = info.data["metrics"]
            enabled = [name for name in METRIC_NAMES if settings.get(name, JudgeMetricSettings()).enabled]
            if not enabled:
                return value
            try:
                JudgePlan(metrics=enabled, mode=info.data["mode"], trials=info.data["trials"], max_input_tokens=value)
            except TooLittleRoom as exc:
                raise ValueError(exc.problem) from None
        return value

    @property
    def configured(self) -> bool:
        return judge_configured(self.judge)

    def settings(self, name: str) -> JudgeMetricSettings:
        return self.metrics.get(name, JudgeMetricSettings())

    def not_run(self, component_id: str) -> str | None:
        if self.configured:
            return None
        return (
            f"LLM-judge metrics not run ({', '.join(METRIC_NAMES)}): no judge configured; set OPENAI_API_KEY "
            f"(and OPENAI_BASE_URL, SPANSCORE_JUDGE_MODEL) or give {component_id} a judge with api_key or base_url"
        )


class JudgeMetrics(Processor):
    def __init__(self, component_id: str, config: JudgeMetricsConfig):
        self.id = component_id
        self.config = config
        enabled = [name for name in METRIC_NAMES if config.settings(name).enabled]
        self.metric_names = tuple(enabled) if config.configured else ()
        self.plan: JudgePlan | None = None
        self.judge: Judge | None = None
        self._no_content_services = FirstSeen()
        if config.configured and enabled:
            self.plan = JudgePlan(
                metrics=enabled,
                mode=config.mode,
                thresholds={name: config.settings(name).threshold for name in enabled},
                trials=config.trials,
                early_stop=config.early_stop,
                redact=config.redact.redaction(),
                max_field_chars=config.max_field_chars,
                max_input_tokens=config.max_input_tokens,
            )

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if self.plan is None:
            not_run = self.config.not_run(self.id)
            if not_run:
                log.info("%s", not_run)
            return
        self.judge = build_judge(self.config.judge)
        log.info(
            "LLM-judge metrics %s judged by %s in %s mode (at most %d calls per trace)",
            ", ".join(self.plan.metrics),
            self.config.judge.model,
            self.config.mode,
            self.plan.max_calls(),
        )

    def judges(self) -> tuple[Judge, ...]:
        return () if self.judge is None else (self.judge,)

    def provenance(self, metric_name: str) -> Provenance:
        # The rubric's wording and code, and every setting that changes how it is asked.
        rubric = RUBRICS[metric_name]
        return Provenance(
            self.config.judge.model,
            revision_of(
                metric_name,
                inspect.getsource(type(rubric)),
                vars(rubric),
                self.config.mode,
                self.config.trials,
                self.config.settings(metric_name).threshold,
                self.config.max_field_chars,
                self.config.max_input_tokens,
                self.config.redact.model_dump(),
            ),
        )

    async def shutdown(self, deadline: float) -> None:
        judge, self.judge = self.judge, None
        if judge is not None:
            await judge.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> list[TraceOutput]:
        if self.plan is None or self.judge is None or not self._sampled(trace.trace_id):
            return []
        agent = agent_trace_of(trace)
        if not agent.has_content:
            return self._nothing_to_judge(trace, agent)
        judged = await self.plan.judge_trace(agent, self.judge)
        usage = judged.usage
        outputs = [
            *map(_skipped_when_over_budget, judged.results),
            EvaluatorUsage(JUDGE_EVALUATOR, usage["calls"], usage["input_tokens"], usage["output_tokens"]),
        ]
        if judged.coverage is not None and usage["calls"] + usage["cached"] > 0:  # the judge was asked
            outputs.append(SpanAttribute(INPUT_SHARE, judged.coverage.share))
        return outputs

    def _nothing_to_judge(self, trace: Trace, agent: AgentTrace) -> list[TraceOutput]:
        conventions = ", ".join(sorted(agent.conventions)) or "none"
        message = f"no user input or final output found in the spans (conventions seen: {conventions})"
        service = trace.service_name
        if isinstance(service, str):  # the client's text: quoted, and remembered, cut short
            service = excerpt(service)
        # A WARNING, once per service: every trace of that service loses its judge
        # metrics until its instrumentation records message content, which is usually
        # opt-in; per trace it would flood the log at the trace rate.
        if self._no_content_services.first(service):
            log.warning(
                "%s: service %r sends agent traces without message content, so the judge metrics are not "
                "run on them: %s. Content capture is often opt-in, e.g. "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
                self.id,
                service,
                message,
            )
        plan = self.plan
        return [
            MetricResult(name=name, threshold=plan.threshold(name), error=message, error_type=NO_CONTENT)
            for name in plan.metrics
        ]

    def _sampled(self, trace_id: bytes) -> bool:
        return trace_id_sampled(trace_id, self.config.sample_ratio)


def _skipped_when_over_budget(result: MetricResult) -> TraceOutput:
    if result.error_type == BUDGET_EXHAUSTED:
        return SpanAttribute(f"eval.{result.name}.skipped", result.error)
    return result


FACTORY = ComponentFactory("processor", "judge_metrics", JudgeMetricsConfig, JudgeMetrics)
