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
scored span also goes into the per-metric score distributions of its group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.attributes import any_value_to_python
from spanscore.core.trace import Trace
from spanscore.offline.blamed_spans import Blamed, blamed_in, localization_of
from spanscore.offline.otlp_files import read_requests
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import agent_trace_of
from spanscore.processors.localization.blame import NONE_FOUND

CASE_KEY = "eval.case.id"
DEFAULT_OUTCOME = "success"
NO_CASE = "(no case)"
UNSET_GROUP = "(unset)"
SCORE_SUFFIX, LABEL_SUFFIX = ".score", ".label"


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
    score_key, error_key = f"eval.{outcome}{SCORE_SUFFIX}", f"eval.{outcome}.error"
    skipped_key = f"eval.{outcome}.skipped"
    for trace in traces.values():
        anchor = trace.anchor
        if anchor is None:
            continue
        attributes = {kv.key: any_value_to_python(kv.value) for kv in anchor.attributes if kv.key.startswith("eval.")}
        scored = {
            key[5 : -len(SCORE_SUFFIX)]: value
            for key, value in attributes.items()
            if key.endswith(SCORE_SUFFIX) and isinstance(value, (int, float))
        }
        ungraded = attributes.get(error_key, attributes.get(skipped_key))
        if not scored and score_key not in attributes and ungraded is None:
            continue
        linked = [traces[link.trace_id] for link in anchor.links if link.trace_id in traces] or [trace]
        group = _group_of(by, trace, linked)
        distributions = run.scores.setdefault(group, defaultdict(list))
        for metric, score in scored.items():
            distributions[metric].append(float(score))
        case_id = str(attributes.get(CASE_KEY, NO_CASE))
        if score_key in attributes:
            label = attributes.get(f"eval.{outcome}{LABEL_SUFFIX}")
            success = label == "pass" if label is not None else attributes[score_key] == 1.0
            attempt = Attempt(
                case_id=case_id,
                success=success,
                trace_id=trace.trace_id_hex,
                group=group,
                steps=[(step.name, step.error is None) for t in linked for step in agent_trace_of(t).tool_steps],
                progress_auc=scored.get("progress_auc"),
                findings=_findings(anchor, attributes) + [f for t in linked if t is not trace for f in _findings_of(t)],
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
    attributes = {kv.key: any_value_to_python(kv.value) for kv in anchor.attributes if kv.key.startswith("eval.")}
    return _findings(anchor, attributes)


def _findings(span: Span, attributes: dict) -> list[Finding]:
    found = []
    for key, value in attributes.items():
        if key.endswith(LABEL_SUFFIX) and value == "fail":
            metric = key[5 : -len(LABEL_SUFFIX)]
            score = attributes.get(f"eval.{metric}{SCORE_SUFFIX}")
            found.append(Finding(metric, span.name, score, str(attributes.get(f"eval.{metric}.explanation", ""))))
        elif key.endswith(".error"):
            found.append(Finding(key[5 : -len(".error")], span.name, None, str(value)))
    return found
