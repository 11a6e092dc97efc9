"""The scores written on spans, read back from scored OTLP/JSON files for `spanscore agree`.

Every span that carries `eval.<metric>.score` gives one `JudgeScore` per metric, with the
label, explanation, evaluator and revision beside it, the threshold the label was cut at
(`eval.<metric>.threshold`, which the judge metrics write) and the trials' scores
(`eval.<metric>.trial_scores`, when the judge was asked more than once), and for a judge
metric of your own its answer before it became a score: the category
(`eval.<metric>.category`) or the value on its scale (`eval.<metric>.raw_score` on
`eval.<metric>.scale`). Spans are read
one by one as they come: no trace is assembled, so a large file costs little memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spanscore.core.score_encoding import read_results
from spanscore.offline.human_labels import LabelError, Scale, parse_scale
from spanscore.offline.otlp_files import read_requests


@dataclass(frozen=True)
class JudgeScore:
    """One metric's score on one span."""

    trace_id: str
    span_id: str
    span_name: str
    is_root: bool
    metric: str
    score: float
    label: str | None
    explanation: str = ""
    evaluator: str = "code"
    revision: str = ""
    threshold: float | None = None
    trial_scores: tuple[float, ...] = ()
    category: str | None = None  # the category a judge metric of your own chose
    scale: Scale | None = None  # the scale a judge metric of your own answered on


@dataclass
class ScoredSpans:
    """The scores found, by (trace id, metric); `problems` as file:line."""

    scores: dict[tuple[str, str], list[JudgeScore]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    requests: int = 0

    def metrics(self) -> set[str]:
        return {metric for _, metric in self.scores}

    def category_verdicts(self, metric: str) -> dict[str, str]:
        """Each category the judge chose for `metric`, with the label (pass or fail) the
        metric gives it: what a person's category means as a verdict."""
        return {
            score.category: score.label
            for (_, name), scores in self.scores.items()
            if name == metric
            for score in scores
            if score.category is not None and score.label is not None
        }

    def find(self, trace_id: str, metric: str, span_id: str | None) -> list[JudgeScore]:
        """The scores a label is about, one per evaluator and revision (a trace scored by
        two judges, or by one rubric and then another, is compared with each): on `span_id`
        when given, else the trace's root span's (or, with no root among them, the first)."""
        found = self.scores.get((trace_id, metric), [])
        if span_id is not None:
            found = [s for s in found if s.span_id == span_id]
        chosen: dict[tuple[str, str], JudgeScore] = {}
        for score in found:
            key = (score.evaluator, score.revision)
            if key not in chosen or (score.is_root and not chosen[key].is_root):
                chosen[key] = score
        return list(chosen.values())


def read_judge_scores(paths: Sequence[Path]) -> ScoredSpans:
    scored = ScoredSpans()
    for path in paths:
        for _, request in read_requests(path, scored.problems):
            scored.requests += 1
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        for score in _scores_of(span):
                            scored.scores.setdefault((score.trace_id, score.metric), []).append(score)
    return scored


def _scores_of(span) -> list[JudgeScore]:
    found = []
    for metric, result in read_results(span.attributes).items():
        score = result.score
        if score is None:
            continue
        threshold = result.get("threshold")
        found.append(
            JudgeScore(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                span_name=span.name,
                is_root=not span.parent_span_id,
                metric=metric,
                score=score,
                label=result.label,
                explanation=result.explanation or "",
                evaluator=result.evaluator or "code",
                revision=result.revision or "",
                threshold=float(threshold) if isinstance(threshold, (int, float)) else None,
                trial_scores=_trial_scores(result.get("trial_scores")),
                category=result.get("category") if isinstance(result.get("category"), str) else None,
                scale=_scale(result.get("scale")),
            )
        )
    return found


def _trial_scores(value: object) -> tuple[float, ...]:
    """The trials' scores, written comma-separated ("0.8,0.6,0.9"); none when unreadable."""
    if not isinstance(value, str):
        return ()
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        return ()


def _scale(value: object) -> Scale | None:
    """The scale a metric of your own answered on (`1-5`); none when absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return parse_scale(value)
    except LabelError:
        return None
