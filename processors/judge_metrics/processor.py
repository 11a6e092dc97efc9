"""`judge_metrics` processor: the seven LLM-as-judge trace metrics.

task_completion, tool_correctness, argument_correctness, step_efficiency, confidence,
plan_adherence and plan_quality, judged by any OpenAI-compatible server (see
`processors/judge_metrics/planner.py` for how calls are shared: at most 8 per trace in
`per_metric` mode, 2 in `combined`). `confidence` and `tool_correctness` also become
the session metrics' signals. What the judge spent goes on the root span
(`eval.judge.*`) and into the score metrics.

Any other name under `metrics` with a `prompt` is a judge metric of the user's own
(`user_metrics`): judged with the same judge, beside the built-ins, one call per trace or
scored span, or, `on: session`, one per session when it closes, its result on the
session's carrier; in `combined` mode one on `trace` is scored in the built-ins' combined
call instead (`joined`). Which sessions are judged follows `sample_ratio` by a hash of
the session id; a trace without a session is no session's turn. Their `{expected_output}`
(on `trace` only) is what the `dataset` (an eval suite's cases) expects of the trace's turn.

With no judge configured (no `judge` section, or one with neither `api_key` nor
`base_url`, as the default config has when OPENAI_API_KEY is unset) the metrics are not
run, and the startup log says so once.

Nothing to judge is not a score: a trace whose spans hold neither the user's input nor
the agent's final output (instrumentation that records spans but not message content)
gets an error result per metric, `no_content`, without asking the judge, which would
otherwise grade an empty transcript and return a confident, meaningless number.

A metric's `examples` file holds cases people judged; they go before its instructions
as worked examples, as many as fit `examples_max_tokens` (the startup log says how many
did not), and the ones used are part of the metric's revision.

Past the judge's `budget`, a metric is skipped, not failed: it gets no result (no score,
no error, nothing counted in the score metrics), only `eval.<metric>.skipped` on the
span saying why. So is a metric the trace gives nothing to judge (`Rubric.skip`:
tool_correctness on a run with no tools offered or called), without a judge call. A
judge outage longer than `max_judge_wait` is a failure: the metric's error says how long
the judge was unreachable and why.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass, replace
from hashlib import blake2b
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.once import FirstSeen
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import RedactConfig, Redaction
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.sampling import trace_id_sampled
from spanscore.core.score_encoding import result_keys, usage_keys
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from spanscore.processors.base import Processor, SessionOutput, TraceOutput
from spanscore.processors.expected_output import (
    DEFAULT_CASE_KEY,
    CaseKey,
    DatasetFile,
    DatasetSetting,
    ExpectedOutput,
    ExpectedOutputs,
)
from spanscore.processors.judge_metrics import user_metrics
from spanscore.processors.judge_metrics.base import Judge
from spanscore.processors.judge_metrics.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge_metrics.config import (
    JudgeSection,
    JudgeTrials,
    build_judge,
    judge_configured,
)
from spanscore.processors.judge_metrics.examples import ExamplesError, WorkedExamples, load_examples
from spanscore.processors.judge_metrics.joined import JoinedRubric, joined_data
from spanscore.processors.judge_metrics.planner import DEFAULT_MAX_INPUT_TOKENS, JudgePlan, TooLittleRoom, Usage
from spanscore.processors.judge_metrics.prompts import DEFAULT_MAX_FIELD_CHARS, PromptBuilder, examples_section
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES, NOT_APPLICABLE, RUBRICS
from spanscore.processors.judge_metrics.user_metrics import (
    Categories,
    OutputSpec,
    Scale,
    UserMetric,
    UserMetrics,
    check_prompt,
)
from spanscore.processors.span_target import SpanTarget

log = logging.getLogger("spanscore.judge_metrics")

JUDGE_EVALUATOR = "judge"  # eval.judge.* on the span, gen_ai.evaluation.judge.* metrics
NO_CONTENT = "no_content"  # error.type of the results for a trace with nothing to judge
# The share of the trace's text the judge was shown, after field limits and max_input_tokens.
INPUT_SHARE = usage_keys(JUDGE_EVALUATOR).input_share


# A metric's worked examples take at most this many tokens of each of its calls by default:
# a few examples of a few hundred words, a small share of max_input_tokens.
DEFAULT_EXAMPLES_MAX_TOKENS = 2_000


@dataclass(frozen=True)
class _ExamplesPath:
    """An `examples` path as written under `metrics.<metric>`, with that metric's name."""

    path: str
    metric: str


def _load_examples(value: Any) -> WorkedExamples | None:
    # Loaded as the setting is validated, so `spanscore validate` lists a file's problems
    # with the config's, at the setting's key path.
    if value is None or isinstance(value, WorkedExamples):
        return value
    path, metric = (value.path, value.metric) if isinstance(value, _ExamplesPath) else (value, None)
    if not isinstance(path, str) or not path.strip():
        raise ValueError("expected the path of an examples file: YAML, or JSON Lines named .jsonl")
    try:
        return load_examples(path, metric)
    except ExamplesError as exc:
        raise ValueError(f"{path} is invalid:\n" + "\n".join(f"    {p}" for p in exc.problems)) from None


@dataclass(frozen=True)
class _NamedPrompt:
    """A `prompt` as written under `metrics.<metric>` (None: not given), with that metric's
    name and whether the processor has a dataset for `{expected_output}`."""

    text: Any
    metric: str
    has_dataset: bool = False

    def __repr__(self) -> str:  # as a config problem quotes it: the prompt as written
        return repr(self.text)


class JudgeMetricSettings(SpanTarget):
    """A metric's settings. A built-in takes the first four; a metric of your own (any
    other name) takes a `prompt`, an `output` and a target (`on`, `where`, `sample_ratio`):
    see `user_metrics`."""

    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    examples: Annotated[WorkedExamples | None, BeforeValidator(_load_examples)] = None
    examples_max_tokens: int = Field(default=DEFAULT_EXAMPLES_MAX_TOKENS, ge=1)
    prompt: str | None = None
    output: OutputSpec = Field(default=None, validate_default=True)

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_of_own_metric(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, _NamedPrompt):
            return value
        if value.metric in RUBRICS:
            if value.text is None:
                return None
            raise ValueError(f"{value.metric} is a built-in judge metric: give a metric of your own another name")
        if value.text is None:  # "missing": the config's problem list then quotes no value
            raise PydanticCustomError(
                "missing",
                "{metric} is not a built-in judge metric ({known}); to define your own, give it a prompt and an output",
                {"metric": value.metric, "known": ", ".join(METRIC_NAMES)},
            )
        if not isinstance(value.text, str) or not value.text.strip():
            raise ValueError("expected the criterion as text")
        if "on" in info.data:  # else `on` has its own error
            check_prompt(value.text, info.data["on"], value.has_dataset)
        return value.text

    @field_validator("output")
    @classmethod
    def _output_with_prompt(cls, value: Any, info: ValidationInfo) -> Any:
        if "prompt" not in info.data:  # the prompt's own problem is reported
            return value
        if info.data["prompt"] is not None and value is None:
            raise PydanticCustomError(
                "missing", "required with a prompt: {kinds}", {"kinds": user_metrics.OUTPUT_KINDS}
            )
        if info.data["prompt"] is None and value is not None:
            raise ValueError("belongs to a judge metric of your own: give it a prompt")
        return value

    @model_validator(mode="after")
    def _target_with_prompt(self) -> JudgeMetricSettings:
        if self.prompt is None and self.on != "trace":
            raise ValueError("on belongs to a judge metric of your own: give it a prompt")
        return self

    def joins_combined_call(self, mode: str) -> bool:
        """A metric of your own on trace is scored in the combined call, in combined mode;
        one naming `{expected_output}` keeps its own call, skipped without one for a trace
        that joins no case (the combined call is the built-ins' too)."""
        if self.prompt is None or self.on != "trace" or mode != "combined":
            return False
        return user_metrics.EXPECTED_OUTPUT not in user_metrics.placeholders(self.prompt)

    def worked_examples(self, redaction: Redaction) -> tuple[str, int]:
        """The text of the examples that fit `examples_max_tokens`, and how many they are."""
        if self.examples is None:
            return "", 0
        return examples_section(self.examples.items, redaction, self.examples_max_tokens)


# A metric's name is a key of results and attributes: checked apart from its settings, so
# a bad name and a problem in its settings are both reported.
MetricName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")]


class JudgeMetricsConfig(ComponentConfig):
    judge: JudgeSection = None
    mode: Literal["per_metric", "combined"] = "per_metric"
    dataset: DatasetSetting | None = None  # an eval suite's cases: what {expected_output} reads
    case_key: CaseKey = DEFAULT_CASE_KEY
    metrics: dict[MetricName, JudgeMetricSettings] = Field(default_factory=dict)
    # Share of traces judged, chosen by trace id as the TraceIdRatioBased sampler does,
    # so the same traces are judged on every replica; the rest get no judge results.
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    trials: JudgeTrials = 1
    early_stop: bool = True
    redact: RedactConfig = Field(default_factory=RedactConfig)
    max_field_chars: int = Field(default=DEFAULT_MAX_FIELD_CHARS, ge=100)
    max_input_tokens: int = Field(default=DEFAULT_MAX_INPUT_TOKENS, ge=1)

    @field_validator("metrics", mode="before")
    @classmethod
    def _examples_know_their_metric(cls, value: Any, info: ValidationInfo) -> Any:
        # An example may name its metric; the file's setting says which one that must be.
        # A prompt says which metric it is for: a built-in name takes none, another needs one.
        if not isinstance(value, dict):
            return value
        has_dataset = info.data.get("dataset", "invalid") is not None  # one that failed to load has its own problem
        named = {}
        for name, settings in value.items():
            if isinstance(settings, dict) and isinstance(name, str):
                settings = dict(settings)
                if isinstance(settings.get("examples"), str):
                    settings["examples"] = _ExamplesPath(settings["examples"], name)
                settings["prompt"] = _NamedPrompt(settings.get("prompt"), name, has_dataset)
            named[name] = settings
        return named

    @field_validator("max_input_tokens")
    @classmethod
    def _room_for_the_trace(cls, value: int, info: ValidationInfo) -> int:
        # Checked with the settings that make the calls, when they are valid themselves.
        if all(key in info.data for key in ("mode", "metrics", "trials", "redact")):
            settings, mode = info.data["metrics"], info.data["mode"]
            redaction = info.data["redact"].redaction()
            joined = []
            for name, own in settings.items():
                if own.prompt is not None and own.enabled and own.output is not None:
                    metric = UserMetric(name, own.prompt, own.output, own.on, own.threshold)
                    metric = replace(metric, examples=own.worked_examples(redaction)[0])
                    if own.joins_combined_call(mode):  # checked with the combined call below
                        joined.append(JoinedRubric(metric))
                        continue
                    problem = user_metrics.room_problem(metric, value)
                    if problem:
                        raise ValueError(problem)
            enabled = [name for name in METRIC_NAMES if settings.get(name, JudgeMetricSettings()).enabled]
            if not enabled and not joined:
                return value
            examples = {name: settings[name].worked_examples(redaction)[0] for name in enabled if name in settings}
            try:
                JudgePlan(
                    metrics=enabled,
                    mode=mode,
                    trials=info.data["trials"],
                    max_input_tokens=value,
                    examples=examples,
                    joined=joined,
                )
            except TooLittleRoom as exc:
                raise ValueError(exc.problem) from None
        return value

    @property
    def configured(self) -> bool:
        return judge_configured(self.judge)

    def settings(self, name: str) -> JudgeMetricSettings:
        return self.metrics.get(name, JudgeMetricSettings())

    @property
    def own_metrics(self) -> tuple[str, ...]:
        """The enabled metrics of the user's own, in config order."""
        return tuple(
            name for name, settings in self.metrics.items() if settings.prompt is not None and settings.enabled
        )

    @property
    def expected_metrics(self) -> tuple[str, ...]:
        """The enabled metrics of the user's own whose prompt names `{expected_output}`."""
        return tuple(
            name
            for name in self.own_metrics
            if user_metrics.EXPECTED_OUTPUT in user_metrics.placeholders(self.settings(name).prompt or "")
        )

    def not_run(self, component_id: str) -> str | None:
        if self.configured:
            return None
        names = ", ".join((*METRIC_NAMES, *self.own_metrics))
        return (
            f"LLM-judge metrics not run ({names}): no judge configured; set OPENAI_API_KEY "
            f"(and OPENAI_BASE_URL, SPANSCORE_JUDGE_MODEL) or give {component_id} a judge with api_key or base_url"
        )


class JudgeMetrics(Processor):
    def __init__(self, component_id: str, config: JudgeMetricsConfig):
        self.id = component_id
        self.config = config
        enabled = [name for name in METRIC_NAMES if config.settings(name).enabled]
        self.metric_names = (*enabled, *config.own_metrics) if config.configured else ()
        self.plan: JudgePlan | None = None
        self.own: UserMetrics | None = None
        self.judge: Judge | None = None
        self.expected: ExpectedOutputs | None = None
        if config.configured and config.expected_metrics:
            assert isinstance(config.dataset, DatasetFile)  # the config requires it
            self.expected = ExpectedOutputs(config.dataset.loaded, config.case_key, f"{component_id}.expected_output")
        self._no_content_services = FirstSeen()
        redaction = config.redact.redaction()
        # Per metric: the worked examples' text and how many of the file's it holds.
        self.examples = {
            name: config.settings(name).worked_examples(redaction) for name in (*METRIC_NAMES, *config.own_metrics)
        }
        self.builder = PromptBuilder(redaction, config.max_field_chars)
        joins = [name for name in config.own_metrics if config.settings(name).joins_combined_call(config.mode)]
        self.joined = [JoinedRubric(self._own_metric(name)) for name in joins]
        if config.configured and len(joins) < len(config.own_metrics):
            own = [(self._own_metric(name), config.settings(name)) for name in config.own_metrics if name not in joins]
            self.own = UserMetrics(own, self.builder, config.max_input_tokens, config.trials)
        if config.configured and (enabled or joins):
            self.plan = JudgePlan(
                metrics=enabled,
                mode=config.mode,
                thresholds={name: config.settings(name).threshold for name in (*enabled, *joins)},
                trials=config.trials,
                early_stop=config.early_stop,
                redact=redaction,
                max_field_chars=config.max_field_chars,
                max_input_tokens=config.max_input_tokens,
                examples={name: self.examples[name][0] for name in enabled},
                joined=self.joined,
            )

    def _own_metric(self, name: str) -> UserMetric:
        settings = self.config.settings(name)
        assert settings.prompt is not None and settings.output is not None  # checked by the config
        return UserMetric(
            name, settings.prompt, settings.output, settings.on, settings.threshold, self.examples[name][0]
        )

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if not self.metric_names or not judge_configured(self.config.judge):  # a plan is made for a judge only
            not_run = self.config.not_run(self.id)
            if not_run:
                log.info("%s", not_run)
            return
        self.judge = build_judge(self.config.judge)
        if self.plan is not None:
            log.info(
                "LLM-judge metrics %s judged by %s in %s mode (at most %d calls per trace)",
                ", ".join(self.plan.names),
                self.config.judge.model,
                self.config.mode,
                self.plan.max_calls(),
            )
        if self.own is not None:
            log.info(
                "judge metrics of your own %s judged by %s (one call per trace, scored span or session each)",
                ", ".join(metric.name for metric, _ in self.own.metrics),
                self.config.judge.model,
            )
        for name in self.metric_names:
            self._log_examples(name)

    def _log_examples(self, name: str) -> None:
        settings = self.config.settings(name)
        if settings.examples is None:
            return
        _, used = self.examples[name]
        total = len(settings.examples.items)
        if used == total:
            log.info("%s: %s: %d worked examples from %s", self.id, name, used, settings.examples.source)
            return
        log.warning(
            "%s: %s: %d of %d worked examples from %s left out: they do not fit examples_max_tokens (%s); "
            "the first that fit, in file order, are used",
            self.id,
            name,
            total - used,
            total,
            settings.examples.source,
            f"{settings.examples_max_tokens:,}",
        )

    def judges(self) -> tuple[Judge, ...]:
        return () if self.judge is None else (self.judge,)

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return () if self.own is None else self.own.session_metric_names

    @property
    def uses_sessions(self) -> bool:
        # A trace's turn, and so its expected output, is its place in its session.
        return self.expected is not None or bool(self.session_metric_names)

    def provenance(self, metric_name: str) -> Provenance:
        # The rubric's wording and code, and every setting that changes how it is asked.
        judge = self.config.judge
        if judge is None:  # then it has no metric_names
            raise ValueError(f"{self.id} has no judge, so no {metric_name} to say the provenance of")
        if metric_name not in RUBRICS:
            return Provenance(judge.model, self._own_revision(metric_name), judged=True)
        rubric = RUBRICS[metric_name]
        return Provenance(
            judge.model,
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
                self.examples[metric_name][0],  # the worked examples used, as the judge reads them
            ),
            judged=True,
        )

    def _own_revision(self, metric_name: str) -> str:
        # What is asked and how the answer is read; not which spans (where, sample_ratio).
        # Scored in the combined call, beside the built-ins, it is asked otherwise.
        settings = self.config.settings(metric_name)
        output = settings.output
        if isinstance(output, (Categories, Scale)):
            output = output.model_dump(by_alias=True)
        return revision_of(
            metric_name,
            inspect.getsource(user_metrics),
            settings.prompt,
            output,
            settings.on,
            "combined call" if settings.joins_combined_call(self.config.mode) else "own call",
            self.config.trials,
            settings.threshold,
            self.config.max_field_chars,
            self.config.max_input_tokens,
            self.config.redact.model_dump(),
            self.examples[metric_name][0],
            *self._expected_outputs_of(metric_name),
        )

    def _expected_outputs_of(self, metric_name: str) -> list[Any]:
        # What the judge compares with: a changed dataset is a new revision of the metrics reading it.
        if self.expected is None or metric_name not in self.config.expected_metrics:
            return []
        return [self.expected.dataset.model_dump(mode="json")]

    async def shutdown(self, deadline: float) -> None:
        judge, self.judge = self.judge, None
        if judge is not None:
            await judge.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> list[TraceOutput]:
        if self.judge is None:
            return []
        self._keep_turn(trace, session)
        if not self._sampled(trace.trace_id):
            return []
        own, builtin = await asyncio.gather(
            self._judge_own(trace, session, self.judge), self._judge_builtin(trace, self.judge)
        )
        own_results, own_usage = own
        outputs = [
            *builtin,
            *_skipped_spans_counted(own_results),
            *(attribute for result in own_results for attribute in _verdict_context(result)),
        ]
        if own_usage.calls + own_usage.cached > 0 or own_results:
            outputs.append(
                EvaluatorUsage(JUDGE_EVALUATOR, own_usage.calls, own_usage.input_tokens, own_usage.output_tokens)
            )
        return outputs

    async def _judge_own(self, trace: Trace, session: Session | None, judge: Judge) -> tuple[list[MetricResult], Usage]:
        if self.own is None:
            return [], Usage()
        expected: ExpectedOutput | str | None = None
        if self.expected is not None:
            expected = self.expected.of(trace, session)
        return await self.own.judge_trace(trace, judge, expected)

    async def _judge_builtin(self, trace: Trace, judge: Judge) -> list[TraceOutput]:
        if self.plan is None:
            return []
        agent = agent_trace_of(trace)
        if not agent.has_content:
            return self._nothing_to_judge(self.plan, trace, agent)
        joined = joined_data(self.joined, trace, agent, self.builder) if self.joined else ()
        judged = await self.plan.judge_trace(agent, judge, joined)
        usage = judged.usage
        outputs = [
            *map(_skipped_when_not_judged, judged.results),
            *(attribute for result in judged.results for attribute in _verdict_context(result)),
            EvaluatorUsage(JUDGE_EVALUATOR, usage["calls"], usage["input_tokens"], usage["output_tokens"]),
        ]
        if judged.coverage is not None and usage["calls"] + usage["cached"] > 0:  # the judge was asked
            outputs.append(SpanAttribute(INPUT_SHARE, judged.coverage.share))
        return outputs

    def _nothing_to_judge(self, plan: JudgePlan, trace: Trace, agent: AgentTrace) -> list[TraceOutput]:
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
        return [
            MetricResult(name=name, threshold=plan.threshold(name), error=message, error_type=NO_CONTENT)
            for name in plan.names
        ]

    def _sampled(self, trace_id: bytes) -> bool:
        return trace_id_sampled(trace_id, self.config.sample_ratio)

    def _keep_turn(self, trace: Trace, session: Session | None) -> None:
        """The trace as a turn of its session, for the `on: session` metrics when it closes."""
        if session is None or not self.session_metric_names:
            return
        session_key = blake2b(session.session_id.encode(), digest_size=16).digest()  # as a trace id is sampled
        if not trace_id_sampled(session_key, self.config.sample_ratio):
            return
        turns = session.state.setdefault(self.id, [])
        turns.append(user_metrics.session_turn(trace, first=not turns))

    async def process_session(self, session: Session) -> list[SessionOutput]:
        turns = session.state.pop(self.id, None)
        if self.judge is None or self.own is None or not turns:
            return []
        results, usage = await self.own.judge_session(turns, self.judge)
        outputs: list[SessionOutput] = [
            *map(_skipped_when_not_judged, results),
            *(attribute for result in results for attribute in _verdict_context(result)),
        ]
        if usage.calls + usage.cached > 0 or results:
            outputs.append(EvaluatorUsage(JUDGE_EVALUATOR, usage.calls, usage.input_tokens, usage.output_tokens))
        return outputs


def _verdict_context(result: MetricResult) -> list[SpanAttribute]:
    """What reading a label against people needs beside it: the threshold it was cut at,
    when the judge was asked several times each trial's score, and for a metric of your
    own the category or scale value it answered (people label in those, not in 0..1). On
    the span the result is about, for a span-level one."""
    if result.score is None:
        return []
    keys = result_keys(result.name)
    pairs: list[tuple[str, str | float]] = [(keys.threshold, float(result.threshold))]
    trial_scores = result.metadata.get("trials", {}).get("scores", [])
    if len(trial_scores) > 1:
        pairs.append((keys.trial_scores, ",".join(f"{s:g}" for s in trial_scores)))
    if "category" in result.metadata:
        pairs.append((keys.category, str(result.metadata["category"])))
    if "raw_score" in result.metadata:
        low, high = result.metadata["scale"]
        pairs.append((keys.raw_score, float(result.metadata["raw_score"])))
        pairs.append((keys.scale, f"{low:g}-{high:g}"))
    return [SpanAttribute(key, value, result.span_id) for key, value in pairs]


# A result with one of these error types was not judged rather than failed.
SKIPPED_ERROR_TYPES = frozenset({BUDGET_EXHAUSTED, NOT_APPLICABLE})


def _skipped_when_not_judged(result: MetricResult) -> MetricResult | SpanAttribute:
    if result.error_type in SKIPPED_ERROR_TYPES and result.error is not None:  # it says why
        return SpanAttribute(result_keys(result.name).skipped, result.error)
    return result


def _skipped_spans_counted(results: list[MetricResult]) -> list[TraceOutput]:
    """`results`, those of spans not judged (the budget spent) as one `skipped` per metric
    on the root saying how many, as rag_metrics says it."""
    outputs: list[TraceOutput] = []
    skipped: dict[str, list[MetricResult]] = {}
    for result in results:
        if result.span_id is not None and result.error_type in SKIPPED_ERROR_TYPES:
            skipped.setdefault(result.name, []).append(result)
        else:
            outputs.append(_skipped_when_not_judged(result))
    for name, left in skipped.items():
        spans = f"{len(left)} span{'s' if len(left) != 1 else ''} not judged"
        outputs.append(SpanAttribute(result_keys(name).skipped, f"{spans}: {left[0].error}"))
    return outputs


FACTORY = ComponentFactory("processor", "judge_metrics", JudgeMetricsConfig, JudgeMetrics)
