"""Attempts read back from scored files: what `report` and `compare` count.

Reads scored OTLP/JSON (what `spanscore score` or a live `file` exporter writes). An
attempt is a span that carries the outcome metric: with the `ground_truth` processor
that is `success`, on a session's `evaluate_session` carrier or on the root span of a
one-trace attempt; without ground truth any metric's pass label can be the outcome
(`--metric task_completion`), one attempt per span scored by it. An outcome recorded as
an error (no score), or skipped because the judge's budget was spent, is counted as
ungraded, not as a failure.

An attempt's traces (the carrier's links, or the trace itself) give its tool calls, its
group (`--by`: any span or resource attribute, looked up on the attempt's own span and
resource first, then on its traces) and the failed or errored results shown beside a
failed attempt, with, where failure_localization ran on them, the spans it blamed and
their categories: why the attempt failed, not only that it did. Every score of every
scored span also goes into the per-metric score distributions of its group, and every
trace's span-level metrics (`offline.span_level`: roll-up and worst spans) are kept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.attributes import any_value_to_python, find_attribute
from spanscore.core.score_encoding import CASE_ID, EncodedResult, read_results
from spanscore.core.trace import Trace
from spanscore.offline.blamed_spans import Blamed, blamed_in, localization_of
from spanscore.offline.otlp_files import read_requests
from spanscore.offline.span_level import SpanMetric, span_metrics_of
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import agent_trace_of
from spanscore.processors.localization.blame import NONE_FOUND

DEFAULT_OUTCOME = "success"
NO_CASE = "(no case)"
UNSET_GROUP = "(unset)"


@dataclass(frozen=True)
class Finding:
    """A result of an attempt that failed or could not be computed."""

    metric: str
    where: str  # the span it is on
    score: float | None
    text: str  # the explanation, or the error


@dataclass
class Attempt:
    case_id: str
    success: bool
    trace_id: str  # of the span the outcome is on
    group: str | None = None
    steps: list[tuple[str, bool]] = field(default_factory=list)  # (tool name, did not fail)
    progress_auc: float | None = None
    findings: list[Finding] = field(default_factory=list)
    # failure_localization on a failed attempt's traces: whether it left a result, the
    # first errors' categories its results name, and every blamed span.
    localized: bool = False
    labels: list[str] = field(default_factory=list)
    blamed: list[Blamed] = field(default_factory=list)

    @property
    def categories(self) -> list[str]:
        """The failure categories found, each once, in the order found."""
        found = [b.category for b in self.blamed] + [label for label in self.labels if label != NONE_FOUND]
        return list(dict.fromkeys(found))


@dataclass
class Ungraded:
    case_id: str
    trace_id: str
    error: str
    group: str | None = None


@dataclass
class ScoredRun:
    outcome: str
    by: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    ungraded: list[Ungraded] = field(default_factory=list)
    scores: dict[str | None, dict[str, list[float]]] = field(default_factory=dict)  # group -> metric -> scores
    span_metrics: list[SpanMetric] = field(default_factory=list)  # per trace, each span-level metric
    problems: list[str] = field(default_factory=list)
    requests: int = 0  # export requests read, whatever they held

    def groups(self) -> list[str | None]:
        """Group values in sorted order; [None] when not grouped."""
        if self.by is None:
            return [None]
        groups = {a.group for a in self.attempts} | {u.group for u in self.ungraded} | set(self.scores)
        return [*sorted(group for group in groups if group is not None)]

    def only(self, group: str | None) -> ScoredRun:
        """The part of this run in one group."""
        return ScoredRun(
            outcome=self.outcome,
            by=None,
            attempts=[a for a in self.attempts if a.group == group],
            ungraded=[u for u in self.ungraded if u.group == group],
            scores={None: self.scores.get(group, {})},
            span_metrics=[m for m in self.span_metrics if m.group == group],
            problems=self.problems,
        )


def read_scored(paths: Sequence[Path], outcome: str = DEFAULT_OUTCOME, by: str | None = None) -> ScoredRun:
    """Every attempt in `paths`; unreadable lines are listed in `problems` and skipped."""
    run = ScoredRun(outcome=outcome, by=by)
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for path in paths:
        for _, request in read_requests(path, run.problems):
            run.requests += 1
            assembler.add(request, 0.0)
    traces = {trace.trace_id: trace for trace in assembler.pop_all()}
    for trace in traces.values():
        anchor = trace.anchor
        if anchor is None:
            continue
        results = read_results(anchor.attributes)
        scored = {
            metric: score
            for metric, result in results.items()
            if isinstance(score := result.get("score"), (int, float))
        }
        result = results.get(outcome, EncodedResult(outcome, {}))
        ungraded = result.get("error", result.get("skipped"))
        if not scored and "score" not in result.fields and ungraded is None:
            continue
        linked = [traces[link.trace_id] for link in anchor.links if link.trace_id in traces] or [trace]
        group = _group_of(by, trace, linked)
        run.span_metrics += span_metrics_of(trace, group)
        distributions = run.scores.setdefault(group, defaultdict(list))
        for metric, score in scored.items():
            distributions[metric].append(float(score))
        case_id = find_attribute(anchor.attributes, CASE_ID)
        case_id = NO_CASE if case_id is None else str(case_id)
        if "score" in result.fields:
            label = result.get("label")
            success = label == "pass" if label is not None else result.get("score") == 1.0
            attempt = Attempt(
                case_id=case_id,
                success=success,
                trace_id=trace.trace_id_hex,
                group=group,
                steps=[(step.name, step.error is None) for t in linked for step in agent_trace_of(t).tool_steps],
                progress_auc=scored.get("progress_auc"),
                findings=_findings(anchor, results) + [f for t in linked if t is not trace for f in _findings_of(t)],
            )
            if not success:
                _add_localization(attempt, linked)
            run.attempts.append(attempt)
        elif ungraded is not None:
            run.ungraded.append(Ungraded(case_id, trace.trace_id_hex, str(ungraded), group))
    return run


def _add_localization(attempt: Attempt, traces: list[Trace]) -> None:
    for trace in traces:
        localization = localization_of(trace)
        if localization is not None:
            attempt.localized = True
            if localization.label:
                attempt.labels.append(localization.label)
        attempt.blamed += blamed_in(trace, localization)


def _group_of(by: str | None, trace: Trace, linked: list[Trace]) -> str | None:
    if by is None:
        return None
    for t in (trace, *linked):
        for attributes in t.attribute_lists():
            for kv in attributes:
                if kv.key == by:
                    return str(any_value_to_python(kv.value))
    return UNSET_GROUP


def _findings_of(trace: Trace) -> list[Finding]:
    anchor = trace.anchor
    if anchor is None:
        return []
    return _findings(anchor, read_results(anchor.attributes))


def _findings(span: Span, results: dict[str, EncodedResult]) -> list[Finding]:
    found = []
    for metric, result in results.items():
        if result.get("label") == "fail":
            found.append(Finding(metric, span.name, result.get("score"), str(result.get("explanation", ""))))
        if "error" in result.fields:
            found.append(Finding(metric, span.name, None, str(result.get("error"))))
    return found
