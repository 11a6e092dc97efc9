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
need a judge; the explanation says when they were not looked for.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import AgentTrace, SpanViews, agent_trace_of, span_views_of
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.localization.blame import EVIDENCE_SOURCE, Blame
from spanscore.processors.localization.evidence import enclosing_call, find_evidence
from spanscore.processors.localization.taxonomy import taxonomy

NAME = "failure_localization"
NONE_FOUND = "none_found"  # the label of a failed run in which no error was found
PREFIX = f"eval.{NAME}."
NO_JUDGE = "evidence only: no judge configured, so errors that need reading the run were not looked for"


class FailureLocalizationConfig(ComponentConfig):
    enabled: bool = True
    when: Literal["failed", "always"] = "failed"
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    max_errors: int = Field(default=20, ge=1, le=1000)  # blamed spans written per trace, the first ones


class FailureLocalization(Processor):
    def __init__(self, component_id: str, config: FailureLocalizationConfig):
        self.config = config
        self.metric_names = (NAME,) if config.enabled else ()

    def provenance(self, metric_name: str) -> Provenance:
        categories = sorted((c.id, c.group) for c in taxonomy().categories.values())
        return Provenance(EVIDENCE_SOURCE, revision_of(NAME, EVIDENCE_SOURCE, self.config.model_dump(), categories))

    async def process_trace(self, trace: Trace, session: Session | None) -> list[TraceOutput]:
        if not self.config.enabled:
            return []
        views = span_views_of(trace)
        if views is None:
            return []
        why = _why_failed(trace, views)
        if why is None and self.config.when == "failed":
            return []
        run = agent_trace_of(trace)
        blames = find_evidence(views, run)[: self.config.max_errors]
        return [self._result(run, views, blames, why), *self._summary(blames), *(_finding(b) for b in blames)]

    def _result(self, run: AgentTrace, views: SpanViews, blames: list[Blame], why: str | None) -> MetricResult:
        failed = f"the run failed ({why})" if why else "the run did not fail"
        if not blames:
            return MetricResult(
                name=NAME,
                score=1.0,
                threshold=self.config.threshold,
                class_label=NONE_FOUND,
                explanation=f"{failed}; no span states an error; {NO_JUDGE}",
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
            f"{len(blames)} error{'s' if len(blames) != 1 else ''} ({counted}); {NO_JUDGE}"
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
        attributes = [SpanAttribute(PREFIX + "errors", len(blames))]
        attributes += [SpanAttribute(f"{PREFIX}errors.{group}", groups[group]) for group in taxonomy().groups]
        if blames:
            ordered = list(dict.fromkeys(b.span_id for b in blames))
            attributes.append(SpanAttribute(PREFIX + "span_ids", ",".join(ordered)))
        return attributes


def _step_start(span_id: str, views: SpanViews) -> int:
    """When the step the span belongs to started: its own start, or that of the tool or
    model call it is part of (an HTTP call under a tool is in that tool's step)."""
    view = views.by_id.get(span_id)
    if view is None:
        return 0
    call = enclosing_call(view, views)
    return (call or view).start


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
            ("eval.failure.category", blame.category),
            ("eval.failure.group", taxonomy()[blame.category].group),
            ("eval.failure.impact", blame.impact),
            ("eval.failure.evidence", blame.evidence),
            ("eval.failure.source", blame.source),
        ),
    )


FACTORY = ComponentFactory("processor", NAME, FailureLocalizationConfig, FailureLocalization)
