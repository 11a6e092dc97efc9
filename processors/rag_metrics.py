"""`rag_metrics` processor: retrieval-augmented answers and tool calls, each scored on its own span.

No judge: an embedder and rules. Per trace (see docs/metrics.md for definitions and
worked examples):

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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import AgentTrace, SpanViews, Step, agent_trace_of, span_views_of
from spanscore.processors.agent_trace.spans import LLM, RETRIEVAL, TOOL
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.config import EmbedderConfig, StaticEmbedderConfig, build_embedder
from spanscore.processors.localization.evidence import EVIDENCE_CHARS, span_failure
from spanscore.processors.metrics import faithfulness as faithfulness_metric
from spanscore.processors.metrics.faithfulness import Context, faithfulness_from_vectors, read_context
from spanscore.processors.metrics.text import sentences
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


class MetricSettings(SpanTarget):
    """A metric's settings: its spans are of the kind its `on` defaults to, narrowed by
    `where` and `sample_ratio` (processors/span_target.py)."""

    fixed_on = True
    enabled: bool = True

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

    def settings(self, name: str) -> MetricSettings:
        return getattr(self, name)


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
class _Plan:
    """What one trace scores, read before the batch is embedded."""

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
        self.embedder: Embedder | None = None
        self._warm_up: asyncio.Task | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        self.embedder = build_embedder(self.config.embedder)
        self._warm_up = asyncio.create_task(self._warm_up_embedder(self.embedder))

    async def _warm_up_embedder(self, embedder: Embedder) -> None:
        try:
            await embedder.warm_up()
        except Exception as exc:  # the first embed raises it again, per trace, as an error result
            log.error("embedder %s failed to load: %s", embedder.name, exc)

    def provenance(self, metric_name: str) -> Provenance:
        settings = self.config.settings(metric_name).model_dump()
        if metric_name == TOOL_ERROR:
            return Provenance("rules", revision_of(metric_name, "rules", settings))
        name = self.embedder.name if self.embedder is not None else "none"
        return Provenance(name, revision_of(metric_name, name, settings))

    async def shutdown(self, deadline: float) -> None:
        if self._warm_up is not None:
            self._warm_up.cancel()
        embedder, self.embedder = self.embedder, None
        if embedder is not None:
            await embedder.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[TraceOutput]:
        [outputs] = await self.process_batch([(trace, session)])
        if isinstance(outputs, BaseException):
            raise outputs
        return outputs

    async def process_batch(
        self, items: Sequence[tuple[Trace, Session | None]]
    ) -> list[Sequence[TraceOutput] | BaseException]:
        """Each trace's plan, the batch's texts embedded in one call, then each trace scored."""
        if self.embedder is None:
            raise RuntimeError("rag_metrics scored before start()")
        embedder = self.embedder
        plans: list[_Plan | BaseException] = []
        texts = _Texts()
        for trace, _ in items:
            try:
                plan = self._plan(trace)
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

    def _plan(self, trace: Trace) -> _Plan:
        plan = _Plan()
        config = self.config
        views = span_views_of(trace)
        if views is None:
            return plan
        # The span views are read already (the summary is made from them); the steps are
        # built only for a trace with something to score here.
        wanted = {RETRIEVAL, TOOL} if config.tool_error.enabled else {RETRIEVAL}
        if not any(view.role in wanted for view in views.views):
            return plan
        run = agent_trace_of(trace)
        if config.tool_error.enabled and run.tool_steps:
            chosen = config.tool_error.chosen(trace)
            results = tool_errors(run, views, config.tool_error.threshold)
            plan.tool_results = [result for result in results if result.span_id in chosen]
        if not run.retrieval_steps:
            return plan
        question = run.user_input[:MAX_QUERY_CHARS]
        if config.faithfulness.enabled:
            chosen = config.faithfulness.chosen(trace)
            with_context = [
                (step, documents) for step, documents in llm_steps_with_context(run) if step.span_id in chosen
            ]
            for step, documents in with_context[:MAX_SPANS]:
                plan.faithfulness.append((step, read_context(step.result or "", documents, question)))
        if config.context_relevance.enabled:
            for step in config.context_relevance.select(trace)[:MAX_SPANS]:
                passages = passages_by_document([d.content for d in step.documents])
                if not passages:
                    continue
                query = (step.query or "")[:MAX_QUERY_CHARS]
                plan.relevance.append((step, query or question, bool(query), passages))
        if config.answer_relevance.enabled and question.strip():
            step = final_answer_step(run)
            if step is not None and step.span_id in config.answer_relevance.chosen(trace):
                claims = tuple(sentences(step.result or "", MAX_ANSWER_SENTENCES))
                if claims:
                    plan.answer = (step, question, claims)
        return plan

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


def _embeds(plan: _Plan) -> bool:
    return bool(plan.faithfulness or plan.relevance or plan.answer)


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


def passages_by_document(documents: Sequence[str]) -> list[tuple[str, ...]]:
    """Each document's passages, as faithfulness reads them (at most
    `faithfulness.MAX_PASSAGES` over all, taken from each document in turn); documents
    without text are left out."""
    context = read_context("", documents)
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
