"""`rag_metrics` processor: retrieval-augmented answers and tool calls, each scored on its own span.

Without a judge: an embedder and rules. Per trace (see docs/metrics.md for definitions
and worked examples):

- `faithfulness` on each LLM span with context and a text answer: the documents of the
  retrieval steps of the same trace that ended before the call started (no convention
  records the context of a call as an attribute of its own, so none is read); scored by
  `metrics.faithfulness` against the trace's question.
- `context_relevance` on each retrieval step with documents: per document, its best
  passage's cosine with the query (the trace's question when the span records none),
  clamped at 0; the step scores the mean over its documents.
- `answer_relevance` on the LLM span that gave the final answer of a trace that
  retrieved: per answer sentence, its cosine with the question clamped at 0; the mean
  over sentences. An answer padded with what was not asked scores lower.
- `tool_error` on each tool span: 1 when the call succeeded, 0 when the span states it
  failed, by `failure_localization`'s `error_status` evidence (error status, exception,
  HTTP status of 400 or more) and the category its text states.

A trace without retrieval gets no faithfulness, context or answer relevance result:
there is nothing to hold its answers against. All texts of a batch of traces (claims,
passages, queries, questions) are embedded in one call.

With a `judge` section that has an api_key or a base_url, faithfulness, context and
answer relevance are asked of the judge instead (`rag_judge`), one call per span, the
calls of a trace at once, on at most `max_judged_spans` LLM spans with context and as
many retrieval spans per trace; the embedder is then not loaded. Its spend is counted
as every judge metric's (`eval.judge.*`, the judge's `budget`); a judge failure is an
error result on its span; past the budget a metric is skipped (`eval.<metric>.skipped`
on the trace's root, saying how many spans). The startup log says which scores them.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import CODE, Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import RedactConfig
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors import rag_judge
from spanscore.processors.agent_trace import AgentTrace, SpanViews, Step, agent_trace_of, span_views_of
from spanscore.processors.agent_trace.spans import LLM, RETRIEVAL, TOOL
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.embedders.config import EmbedderConfig, StaticEmbedderConfig
from spanscore.processors.embedders.held import HeldEmbedder
from spanscore.processors.judge_metrics.base import Judge, JudgeError, Verdict
from spanscore.processors.judge_metrics.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge_metrics.config import JudgeSection, build_judge, judge_configured
from spanscore.processors.judge_metrics.planner import DEFAULT_MAX_INPUT_TOKENS, Usage
from spanscore.processors.judge_metrics.prompts import DEFAULT_MAX_FIELD_CHARS
from spanscore.processors.localization.evidence import EVIDENCE_CHARS, span_failure
from spanscore.processors.metrics import faithfulness as faithfulness_metric
from spanscore.processors.metrics.faithfulness import Context, faithfulness_from_vectors, read_context
from spanscore.processors.metrics.text import sentences
from spanscore.processors.rag_judge import RagJudge, room_problem
from spanscore.processors.span_target import SpanTarget, Target

log = logging.getLogger("spanscore.rag_metrics")

FAITHFULNESS = faithfulness_metric.NAME
CONTEXT_RELEVANCE = "context_relevance"
ANSWER_RELEVANCE = "answer_relevance"
TOOL_ERROR = "tool_error"
# Chosen with the static embedder on the labelled triples' questions, each against its own
# documents and answer and against another triple's (`bench/faithfulness.py`, docs/metrics.md).
CONTEXT_RELEVANCE_THRESHOLD = 0.4
ANSWER_RELEVANCE_THRESHOLD = 0.3
TOOL_ERROR_THRESHOLD = 0.5  # the score is 0 or 1
MAX_QUERY_CHARS = 2_000
MAX_ANSWER_SENTENCES = faithfulness_metric.MAX_CLAIMS
# Spans scored per trace and metric: the first this many LLM spans with context, and
# retrieval steps; the rest of a very long run is left unscored.
MAX_SPANS = 100
# With a judge, spans judged per trace and metric (a call each): at most 2 x this + 1
# calls per trace. A run retrieving more often than this is rare; its first spans are judged.
DEFAULT_MAX_JUDGED_SPANS = 10
JUDGED = (FAITHFULNESS, CONTEXT_RELEVANCE, ANSWER_RELEVANCE)
JUDGE_EVALUATOR = "judge"  # its spend is counted with the judge metrics': eval.judge.*


class MetricSettings(SpanTarget):
    """A metric's settings: its spans are of the kind its `on` defaults to, narrowed by
    `where` and `sample_ratio` (processors/span_target.py)."""

    fixed_on = True
    enabled: bool = True
    threshold: float = Field(default=TOOL_ERROR_THRESHOLD, ge=0.0, le=1.0)  # each metric sets its own

    def chosen(self, trace: Trace) -> set[str]:
        """The ids (hex) of the spans of `trace` that `where` and `sample_ratio` choose."""
        return {step.span_id for step in self.select(trace)}


class FaithfulnessSettings(MetricSettings):
    on: Target = LLM
    threshold: float = Field(default=faithfulness_metric.DEFAULT_THRESHOLD, ge=0.0, le=1.0)


class ContextRelevanceSettings(MetricSettings):
    on: Target = RETRIEVAL
    threshold: float = Field(default=CONTEXT_RELEVANCE_THRESHOLD, ge=0.0, le=1.0)


class AnswerRelevanceSettings(MetricSettings):
    on: Target = LLM  # the final answer's span, when `where` and `sample_ratio` choose it
    threshold: float = Field(default=ANSWER_RELEVANCE_THRESHOLD, ge=0.0, le=1.0)


class ToolErrorSettings(MetricSettings):
    on: Target = TOOL
    threshold: float = Field(default=TOOL_ERROR_THRESHOLD, ge=0.0, le=1.0)


class RagMetricsConfig(ComponentConfig):
    # Static by default: the thresholds were chosen on its cosines, which run lower than MiniLM's.
    embedder: EmbedderConfig = Field(default_factory=StaticEmbedderConfig)
    faithfulness: FaithfulnessSettings = Field(default_factory=FaithfulnessSettings)
    context_relevance: ContextRelevanceSettings = Field(default_factory=ContextRelevanceSettings)
    answer_relevance: AnswerRelevanceSettings = Field(default_factory=AnswerRelevanceSettings)
    tool_error: ToolErrorSettings = Field(default_factory=ToolErrorSettings)
    # With a judge (a section with an api_key or a base_url) the three RAG metrics are judged.
    judge: JudgeSection = None
    max_judged_spans: int = Field(default=DEFAULT_MAX_JUDGED_SPANS, ge=1, le=MAX_SPANS)
    redact: RedactConfig = Field(default_factory=RedactConfig)
    max_field_chars: int = Field(default=DEFAULT_MAX_FIELD_CHARS, ge=100)
    max_input_tokens: int = Field(default=DEFAULT_MAX_INPUT_TOKENS, ge=1)

    @field_validator("max_input_tokens")
    @classmethod
    def _room_for_the_texts(cls, value: int) -> int:
        problem = room_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    def settings(self, name: str) -> MetricSettings:
        return getattr(self, name)

    @property
    def judged(self) -> tuple[str, ...]:
        """The metrics the judge scores: the enabled RAG metrics, when a judge is configured."""
        if not judge_configured(self.judge):
            return ()
        return tuple(name for name in JUDGED if self.settings(name).enabled)


@dataclass
class _Texts:
    """The texts one batch embeds, each once, with the row it gets."""

    rows: dict[str, int] = field(default_factory=dict)

    def add(self, texts: Sequence[str]) -> None:
        for text in texts:
            self.rows.setdefault(text, len(self.rows))

    def vectors(self, embedded: np.ndarray | None, texts: Sequence[str]) -> np.ndarray:
        if embedded is None:  # texts are embedded whenever a plan added some
            raise RuntimeError("rag_metrics planned texts that were not embedded")
        return embedded[[self.rows[text] for text in texts]]


@dataclass
class _Targets:
    """What one trace's metrics are about, read once whoever scores them: the LLM steps
    with their context documents, the retrieval steps with their query (whether the span
    recorded it) and documents, the final answer's step; and the tool results, scored already."""

    question: str = ""
    contexts: list[tuple[Step, list[str]]] = field(default_factory=list)
    retrievals: list[tuple[Step, str, bool, list[str]]] = field(default_factory=list)
    answer: Step | None = None
    tool_results: list[MetricResult] = field(default_factory=list)


@dataclass
class _Plan:
    """What one trace's embedder scores, read before the batch is embedded."""

    faithfulness: list[tuple[Step, Context]] = field(default_factory=list)
    relevance: list[tuple[Step, str, bool, list[tuple[str, ...]]]] = field(default_factory=list)
    answer: tuple[Step, str, tuple[str, ...]] | None = None
    tool_results: list[MetricResult] = field(default_factory=list)


class RagMetrics(Processor):
    def __init__(self, component_id: str, config: RagMetricsConfig):
        self.id = component_id
        self.config = config
        self.metric_names = tuple(
            name
            for name in (FAITHFULNESS, CONTEXT_RELEVANCE, ANSWER_RELEVANCE, TOOL_ERROR)
            if config.settings(name).enabled
        )
        self.held = HeldEmbedder()
        self.judge: Judge | None = None
        self.rag_judge: RagJudge | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        config = self.config
        if config.judge is not None and config.judged:  # judge_configured, as `judged` says
            self.judge = build_judge(config.judge)
            self.rag_judge = RagJudge(
                self.judge, config.redact.redaction(), config.max_field_chars, config.max_input_tokens
            )
            log.info(
                "%s: %s judged by %s (at most %d judge calls per trace); no embedder loaded",
                self.id,
                ", ".join(config.judged),
                config.judge.model,
                self._max_calls(),
            )
            return
        embedder = self.held.start(config.embedder)
        scored = [name for name in JUDGED if name in self.metric_names]
        if scored:
            log.info(
                "%s: %s scored by the embedder %s: no judge configured (set OPENAI_API_KEY, or give %s "
                "a judge with api_key or base_url, to have them judged)",
                self.id,
                ", ".join(scored),
                embedder.name,
                self.id,
            )

    def _max_calls(self) -> int:
        """Judge calls per trace at most, retries aside: a call per span judged."""
        judged = self.config.judged
        per_span = sum(name in judged for name in (FAITHFULNESS, CONTEXT_RELEVANCE))
        return per_span * self.config.max_judged_spans + (ANSWER_RELEVANCE in judged)

    def judges(self) -> tuple[Judge, ...]:
        return () if self.judge is None else (self.judge,)

    def provenance(self, metric_name: str) -> Provenance:
        # Which spans are scored (on, where, sample_ratio) is no part of how each is scored.
        settings = self.config.settings(metric_name).model_dump(exclude=set(SpanTarget.model_fields))
        if metric_name == TOOL_ERROR:
            return Provenance(CODE, revision_of(metric_name, CODE, settings))
        judge = self.config.judge
        if judge is not None and metric_name in self.config.judged:
            # The prompts' wording and code, and every setting that changes what is asked.
            asked = self.config.model_dump(
                include={"max_judged_spans", "redact", "max_field_chars", "max_input_tokens"}
            )
            prompts = inspect.getsource(rag_judge)
            return Provenance(judge.model, revision_of(metric_name, judge.model, settings, asked, prompts), judged=True)
        name = self.held.name
        return Provenance(name, revision_of(metric_name, name, settings))

    async def shutdown(self, deadline: float) -> None:
        await self.held.close()
        judge, self.judge, self.rag_judge = self.judge, None, None
        if judge is not None:
            await judge.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[TraceOutput]:
        [outputs] = await self.process_batch([(trace, session)])
        if isinstance(outputs, BaseException):
            raise outputs
        return outputs

    async def process_batch(
        self, items: Sequence[tuple[Trace, Session | None]]
    ) -> list[Sequence[TraceOutput] | BaseException]:
        """Judged: each trace's calls, every trace at once. Else each trace's plan, the
        batch's texts embedded in one call, then each trace scored."""
        if self.rag_judge is not None:
            judging = self.rag_judge
            return list(await asyncio.gather(*(self._judged_or_error(trace, judging) for trace, _ in items)))
        embedder = self.held.started(self.id)
        plans: list[_Plan | BaseException] = []
        texts = _Texts()
        for trace, _ in items:
            try:
                plan = _embedder_plan(self._targets(trace))
            except Exception as exc:
                plans.append(exc)
                continue
            plans.append(plan)
            for _, context in plan.faithfulness:
                if context.claims and context.passages:
                    texts.add(context.texts)
            for _, query, _, passages in plan.relevance:
                texts.add([query, *(p for document in passages for p in document)])
            if plan.answer is not None:
                texts.add([plan.answer[1], *plan.answer[2]])
        try:
            embedded = await embedder.embed(list(texts.rows)) if texts.rows else None
        except Exception as exc:  # each trace that needed it fails as it would have alone
            return [p if isinstance(p, BaseException) else exc if _embeds(p) else p.tool_results for p in plans]
        outputs: list[Sequence[TraceOutput] | BaseException] = []
        for plan in plans:
            if isinstance(plan, BaseException):
                outputs.append(plan)
                continue
            try:
                outputs.append(self._score(plan, texts, embedded))
            except Exception as exc:
                outputs.append(exc)
        return outputs

    def _targets(self, trace: Trace) -> _Targets:
        targets = _Targets()
        config = self.config
        views = span_views_of(trace)
        if views is None:
            return targets
        # The span views are read already (the summary is made from them); the steps are
        # built only for a trace with something to score here.
        wanted = {RETRIEVAL, TOOL} if config.tool_error.enabled else {RETRIEVAL}
        if not any(view.role in wanted for view in views.views):
            return targets
        run = agent_trace_of(trace)
        if config.tool_error.enabled and run.tool_steps:
            chosen = config.tool_error.chosen(trace)
            results = tool_errors(run, views, config.tool_error.threshold)
            targets.tool_results = [result for result in results if result.span_id in chosen]
        if not run.retrieval_steps:
            return targets
        limit = config.max_judged_spans if self.rag_judge is not None else MAX_SPANS
        question = targets.question = run.user_input[:MAX_QUERY_CHARS]
        if config.faithfulness.enabled:
            chosen = config.faithfulness.chosen(trace)
            with_context = [
                (step, documents) for step, documents in llm_steps_with_context(run) if step.span_id in chosen
            ]
            targets.contexts = with_context[:limit]
        if config.context_relevance.enabled:
            for step in config.context_relevance.select(trace):
                documents = [d.content for d in step.documents if d.content.strip()]
                if documents and len(targets.retrievals) < limit:
                    query = (step.query or "")[:MAX_QUERY_CHARS]
                    targets.retrievals.append((step, query or question, bool(query), documents))
        if config.answer_relevance.enabled and question.strip():
            step = final_answer_step(run)
            if step is not None and step.span_id in config.answer_relevance.chosen(trace):
                targets.answer = step
        return targets

    async def _judged_or_error(self, trace: Trace, judging: RagJudge) -> Sequence[TraceOutput] | BaseException:
        """A trace's outputs, or what failed it: a trace of the batch fails alone."""
        try:
            return await self._judged(self._targets(trace), judging)
        except Exception as exc:
            return exc

    async def _judged(self, targets: _Targets, judging: RagJudge) -> list[TraceOutput]:
        """The trace's results from the judge, its calls at once, and their spend."""
        usage = Usage()
        asks: list[tuple[str, Step, Awaitable[Verdict]]] = []
        for step, documents in targets.contexts:
            asks.append(
                (FAITHFULNESS, step, judging.faithfulness(targets.question, documents, step.result or "", usage))
            )
        for step, query, recorded, documents in targets.retrievals:
            asks.append((CONTEXT_RELEVANCE, step, judging.context_relevance(query, recorded, documents, usage)))
        if targets.answer is not None:
            answer = targets.answer.result or ""
            asks.append((ANSWER_RELEVANCE, targets.answer, judging.answer_relevance(targets.question, answer, usage)))
        verdicts = await asyncio.gather(*(_verdict_or_error(ask) for _, _, ask in asks))
        outputs: list[TraceOutput] = []
        skipped: dict[str, list[JudgeError]] = {}
        for (name, step, _), verdict in zip(asks, verdicts):
            threshold = self.config.settings(name).threshold
            if isinstance(verdict, Verdict):
                outputs.append(
                    MetricResult(
                        name=name,
                        score=min(1.0, verdict.score),
                        threshold=threshold,
                        explanation=verdict.explanation,
                        span_id=step.span_id,
                        metadata=verdict.metadata,
                    )
                )
            elif verdict.error_type == BUDGET_EXHAUSTED:
                skipped.setdefault(name, []).append(verdict)
            else:
                outputs.append(
                    MetricResult(
                        name=name,
                        threshold=threshold,
                        error=str(verdict) or verdict.error_type,
                        error_type=verdict.error_type,
                        span_id=step.span_id,
                    )
                )
        for name, errors in skipped.items():
            spans = f"{len(errors)} span{'s' if len(errors) != 1 else ''} not judged"
            outputs.append(SpanAttribute(result_keys(name).skipped, f"{spans}: {errors[0]}"))
        outputs.extend(targets.tool_results)
        if usage.calls or usage.cached:
            outputs.append(EvaluatorUsage(JUDGE_EVALUATOR, usage.calls, usage.input_tokens, usage.output_tokens))
        return outputs

    def _score(self, plan: _Plan, texts: _Texts, embedded: np.ndarray | None) -> list[MetricResult]:
        results: list[MetricResult] = []
        threshold = self.config.faithfulness.threshold
        for step, context in plan.faithfulness:
            vectors = texts.vectors(embedded, context.texts) if context.claims and context.passages else None
            scored = faithfulness_from_vectors(context, vectors)
            results.append(
                MetricResult(
                    name=FAITHFULNESS,
                    score=scored.score,
                    threshold=threshold,
                    explanation=scored.reason,
                    span_id=step.span_id,
                    metadata={
                        "documents": scored.documents,
                        "claims": len(scored.claims),
                        "unsupported": len(scored.unsupported),
                    },
                )
            )
        for step, query, recorded, passages in plan.relevance:
            results.append(self._context_relevance(step, query, recorded, passages, texts, embedded))
        if plan.answer is not None:
            results.append(self._answer_relevance(*plan.answer, texts, embedded))
        results.extend(plan.tool_results)
        return results

    def _context_relevance(
        self,
        step: Step,
        query: str,
        recorded: bool,
        passages: list[tuple[str, ...]],
        texts: _Texts,
        embedded: np.ndarray | None,
    ) -> MetricResult:
        query_vector = texts.vectors(embedded, [query])[0]
        relevance = [
            float(np.clip(texts.vectors(embedded, document) @ query_vector, 0.0, 1.0).max()) for document in passages
        ]
        score = sum(relevance) / len(relevance)
        threshold = self.config.context_relevance.threshold
        relevant = sum(value >= threshold for value in relevance)
        against = "the query" if recorded else "the user's input (the span records no query)"
        return MetricResult(
            name=CONTEXT_RELEVANCE,
            score=min(1.0, score),
            threshold=threshold,
            explanation=f"{relevant} of {len(relevance)} documents relevant to {against}; "
            + "per document: "
            + ", ".join(f"{value:.2f}" for value in relevance[:10])
            + (", ..." if len(relevance) > 10 else ""),
            span_id=step.span_id,
            metadata={"documents": len(relevance), "relevant": relevant},
        )

    def _answer_relevance(
        self, step: Step, question: str, claims: tuple[str, ...], texts: _Texts, embedded: np.ndarray | None
    ) -> MetricResult:
        question_vector = texts.vectors(embedded, [question])[0]
        relevance = np.clip(texts.vectors(embedded, claims) @ question_vector, 0.0, 1.0)
        score = float(relevance.mean())
        threshold = self.config.answer_relevance.threshold
        off_topic = [claim for claim, value in zip(claims, relevance) if value < threshold]
        explanation = f"{len(claims) - len(off_topic)} of {len(claims)} sentences of the answer address the question"
        if off_topic:
            explanation += "; not about it: " + "; ".join(f'"{excerpt(claim, 160)}"' for claim in off_topic[:3])
            explanation += "; ..." if len(off_topic) > 3 else ""
        return MetricResult(
            name=ANSWER_RELEVANCE,
            score=min(1.0, score),
            threshold=threshold,
            explanation=explanation,
            span_id=step.span_id,
            metadata={"sentences": len(claims), "off_topic": len(off_topic)},
        )


def _embedder_plan(targets: _Targets) -> _Plan:
    """The claims, passages and sentences the embedder scores the targets by."""
    question = targets.question
    plan = _Plan(tool_results=targets.tool_results)
    plan.faithfulness = [
        (step, read_context(step.result or "", documents, question)) for step, documents in targets.contexts
    ]
    # A retrieval's documents are most often the very ones an LLM step was given: read once.
    read = {tuple(documents): context for (_, documents), (_, context) in zip(targets.contexts, plan.faithfulness)}
    for step, query, recorded, documents in targets.retrievals:
        passages = passages_by_document(documents, read.get(tuple(documents)))
        if passages:
            plan.relevance.append((step, query, recorded, passages))
    if targets.answer is not None:
        claims = tuple(sentences(targets.answer.result or "", MAX_ANSWER_SENTENCES))
        if claims:
            plan.answer = (targets.answer, question, claims)
    return plan


def _embeds(plan: _Plan) -> bool:
    return bool(plan.faithfulness or plan.relevance or plan.answer)


async def _verdict_or_error(ask: Awaitable[Verdict]) -> Verdict | JudgeError:
    """A judge failure (budget spent included) fails its span alone."""
    try:
        return await ask
    except JudgeError as exc:
        return exc


def llm_steps_with_context(run: AgentTrace) -> list[tuple[Step, list[str]]]:
    """Each LLM step with a text answer, and the documents (each once, in order) of the
    retrieval steps that ended before it started; steps without such documents are left out."""
    retrievals = sorted(run.retrieval_steps, key=lambda step: step.end_time_unix_nano)
    found = []
    for step in run.llm_steps:
        if not (step.result or "").strip():
            continue  # only tool calls asked for: no answer to hold against the documents
        documents = [
            document.content
            for retrieval in retrievals
            if 0 < retrieval.end_time_unix_nano <= step.start_time_unix_nano
            for document in retrieval.documents
            if document.content.strip()
        ]
        if documents:
            found.append((step, list(dict.fromkeys(documents))))
    return found


def passages_by_document(documents: Sequence[str], context: Context | None = None) -> list[tuple[str, ...]]:
    """Each document's passages, as faithfulness reads them (at most
    `faithfulness.MAX_PASSAGES` over all, taken from each document in turn); documents
    without text are left out. `context`, when given, is these documents read already."""
    context = context or read_context("", documents)
    grouped: dict[int, list[str]] = {}
    for passage, owner in zip(context.passages, context.passage_documents):
        grouped.setdefault(owner, []).append(passage)
    return [tuple(grouped[owner]) for owner in sorted(grouped)]


def final_answer_step(run: AgentTrace) -> Step | None:
    """The LLM step that gave the trace's final answer: the last whose text is it, else the
    last with any text."""
    answered = [step for step in run.llm_steps if (step.result or "").strip()]
    final = run.final_output.strip()
    return next((step for step in reversed(answered) if (step.result or "").strip() == final), None) or (
        answered[-1] if answered else None
    )


def tool_errors(run: AgentTrace, views: SpanViews, threshold: float = TOOL_ERROR_THRESHOLD) -> list[MetricResult]:
    """`tool_error` for each tool step with a span of its own."""
    results = []
    for step in run.tool_steps:
        view = views.by_id.get(step.span_id)
        if not step.from_span or view is None:
            continue
        failure = span_failure(view)
        if failure is None:
            score, explanation, category = 1.0, f"{step.name} succeeded: its span states no error", None
        else:
            category = failure.category or "service_error"
            explanation = f"{step.name} failed (error_status, {category}): {excerpt(failure.text, EVIDENCE_CHARS)}"
            score = 0.0
        metadata: dict[str, Any] = {"tool": step.name}
        if category is not None:
            metadata["category"] = category
        if failure is not None and failure.status_code is not None:
            metadata["http_status"] = failure.status_code
        results.append(
            MetricResult(
                name=TOOL_ERROR,
                score=score,
                threshold=threshold,
                explanation=explanation,
                span_id=step.span_id,
                metadata=metadata,
            )
        )
    return results


FACTORY = ComponentFactory("processor", "rag_metrics", RagMetricsConfig, RagMetrics)
