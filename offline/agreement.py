"""`spanscore agree`: does the judge agree with people? The comparison itself.

People's labels (`offline.human_labels`) are joined to the scores on the spans
(`offline.judge_scores`) by trace id, span id (when the label names one) and metric, and
grouped by metric, evaluator and revision: a new judge model or rubric is a new group,
never blended with the old one. Per group (`agreement_stats` has the definitions):

- n, accuracy, κ (Cohen's, unweighted, on the pass/fail classes or a metric's categories;
  quadratic-weighted on the scale's points when every label is a score on a scale such
  as 1–5), precision, recall and F1
  of the failing class, Spearman's ρ where people gave scores, each with its interval;
- the confusion table of the classes (and of the scale's points, for such a scale);
- the human ceiling: κ between people, where two or more labelled the same item;
- the judge's own consistency, where it was asked several times (`trials`);
- the threshold that best matches people, next to the configured one;
- the disagreements, worst first.

A person's class is their label, or for a score without a label, pass when the score
(as a share of its scale) reaches the judge's threshold. The judge's class is the label
on the span. For a judge metric of your own with categories, a person's label that is
one of the categories the judge chose, or any label that is not a pass/fail spelling, is
a category, compared with the category on the span (`eval.<metric>.category`); a
person's score without a scale is on the scale on the span (`eval.<metric>.scale`).
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spanscore.core.result import DEFAULT_THRESHOLD
from spanscore.offline import agreement_stats as stats
from spanscore.offline.human_labels import FAIL, PASS, HumanLabel, LabelError, Scale, normalized_label, on_scale
from spanscore.offline.judge_scores import JudgeScore, ScoredSpans


@dataclass(frozen=True)
class Compared:
    """One person's label beside the judge's score on the same item."""

    judge: JudgeScore
    human: HumanLabel
    human_class: str
    judge_class: str
    # pass or fail, what the person's class means as a verdict (a category's as the
    # metric labels it); None when not known
    human_verdict: str | None = None

    @property
    def severity(self) -> float:
        """How far apart the two are, 0 to 1: the judge's score against the person's score
        (as a share of its scale), or against 1 for pass and 0 for fail."""
        unit = self.human.unit_score
        if unit is None:
            unit = {PASS: 1.0, FAIL: 0.0}.get(self.human_verdict or "", 0.5)
        return abs(self.judge.score - unit)


@dataclass
class Group:
    metric: str
    evaluator: str
    revision: str
    rows: list[Compared] = field(default_factory=list)

    @property
    def threshold(self) -> float | None:
        """The threshold the judge's labels were cut at, when the spans say."""
        known = {row.judge.threshold for row in self.rows if row.judge.threshold is not None}
        return known.pop() if len(known) == 1 else None


@dataclass
class Joined:
    groups: list[Group]
    unmatched_traces: int  # labels about traces (or spans) no scored file holds
    unscored_metrics: dict[str, int]  # metric -> labels, for metrics no span carries
    problems: list[str] = field(default_factory=list)  # labels that do not fit their metric, as file:line


def join(labels: Iterable[HumanLabel], scored: ScoredSpans, metric: str | None = None) -> Joined:
    groups: dict[tuple[str, str, str], Group] = {}
    scored_metrics = scored.metrics()
    verdicts: dict[str, dict[str, str]] = {}  # metric -> the judge's categories, each pass or fail
    unmatched = 0
    unscored: dict[str, int] = defaultdict(int)
    problems: list[str] = []
    for label in labels:
        if metric is not None and label.metric != metric:
            continue
        if label.metric not in scored_metrics:
            unscored[label.metric] += 1
            continue
        found = scored.find(label.trace_id, label.metric, label.span_id)
        if not found:
            unmatched += 1
        if label.metric not in verdicts:
            verdicts[label.metric] = scored.category_verdicts(label.metric)
        for judged in found:
            try:
                person = on_scale(label, judged.scale)
            except LabelError as exc:
                problems.append(f"{label.source}: {exc}")
                break
            key = (judged.metric, judged.evaluator, judged.revision)
            group = groups.setdefault(key, Group(*key))
            group.rows.append(_compared(judged, person, verdicts[label.metric]))
    return Joined(
        sorted(groups.values(), key=lambda g: (g.metric, g.evaluator, g.revision)), unmatched, dict(unscored), problems
    )


def _compared(judged: JudgeScore, person: HumanLabel, verdicts: dict[str, str]) -> Compared:
    """The person's class beside the judge's: categories when both are at that level."""
    threshold = judged.threshold if judged.threshold is not None else DEFAULT_THRESHOLD
    text = person.text
    if judged.category is not None and text is not None:
        category = next((c for c in verdicts if c.casefold() == text.casefold()), None)
        if category is not None or normalized_label(text) not in (PASS, FAIL):
            category = category or text
            return Compared(judged, replace(person, label=category), category, judged.category, verdicts.get(category))
    human_class = person.verdict(threshold)
    judge_class = judged.label or (PASS if judged.score >= threshold else FAIL)
    return Compared(judged, person, human_class, judge_class, human_class if human_class in (PASS, FAIL) else None)


def classes_of(values: Iterable[str]) -> list[str]:
    """fail and pass first (when present), then any other class in order."""
    present = set(values)
    return [c for c in (FAIL, PASS) if c in present] + sorted(present - {FAIL, PASS})


def ordinal_scale(labels: Iterable[HumanLabel]) -> Scale | None:
    """The scale when every label is a score on one of its points (1, 2, ... 5 on 1-5), else
    None: a half point (1.5) or a label without a score makes the labels classes."""
    labels = list(labels)
    scales = {label.scale for label in labels}
    if len(scales) != 1:
        return None
    scale = scales.pop()
    if not scale.ordinal or any(label.score is None or not (label.score - scale.low).is_integer() for label in labels):
        return None
    return scale


def _points(labels: Iterable[HumanLabel], scale: Scale) -> np.ndarray:
    """Each label's point on `scale`, 0 its lowest: of labels ordinal_scale found on it."""
    points = []
    for label in labels:
        if label.score is None:
            raise ValueError("a label without a score has no point on a scale")
        points.append(int(label.score - scale.low))
    return np.array(points)


def compare(group: Group, resamples: int = stats.DEFAULT_RESAMPLES, seed: int = stats.DEFAULT_SEED) -> dict[str, Any]:
    """The result of one group, as `agree --json` writes it."""
    rows = group.rows
    traces = {trace: i for i, trace in enumerate(sorted({row.judge.trace_id for row in rows}))}
    bootstrap = stats.Bootstrap(np.array([traces[row.judge.trace_id] for row in rows]), resamples, seed)
    classes = classes_of(itertools.chain((r.human_class for r in rows), (r.judge_class for r in rows)))
    index = {name: i for i, name in enumerate(classes)}
    human = np.array([index[r.human_class] for r in rows])
    judge = np.array([index[r.judge_class] for r in rows])
    k = len(classes)

    def table(weights: np.ndarray) -> np.ndarray:
        return stats.tables(weights, human, judge, k)

    scale = ordinal_scale(row.human for row in rows)
    if scale is not None:
        human_points = _points((r.human for r in rows), scale)
        judge_points = np.array([scale.point_of_unit(r.judge.score) for r in rows])
        point_weights = stats.quadratic_weights(scale.points)

        def kappa(weights: np.ndarray) -> np.ndarray:
            return stats.kappa(stats.tables(weights, human_points, judge_points, scale.points), point_weights)

        kappa_kind = f"quadratic-weighted κ on the {scale} scale's points (the judge's score mapped to the nearest)"
    else:

        def kappa(weights: np.ndarray) -> np.ndarray:
            return stats.kappa(table(weights), stats.nominal_weights(k))

        kappa_kind = "Cohen's κ on the categories (unweighted)" if _on_categories(rows) else "Cohen's κ on the labels"
    fail = index.get(FAIL)
    failing_table = table
    if _on_categories(rows):
        # The failing class of categories is the failing categories: each side's verdict,
        # where the person's category has one (a category the judge never chose has none).
        known = np.array([row.human_verdict is not None for row in rows], dtype=np.float64)
        human_verdicts = np.array([int(row.human_verdict != FAIL) for row in rows])  # 0 fail, 1 pass
        judge_verdicts = np.array([int(row.judge.label != FAIL) for row in rows])
        fail = 0

        def failing_table(weights: np.ndarray) -> np.ndarray:
            return stats.tables(weights * known, human_verdicts, judge_verdicts, 2)

    def failing(part: int):
        def statistic(weights: np.ndarray) -> np.ndarray:
            if fail is None:
                return np.full(weights.shape[0], np.nan)
            return stats.precision_recall_f1(failing_table(weights), fail)[part]

        return statistic

    named = {
        "accuracy": lambda w: stats.accuracy(table(w)),
        "kappa": kappa,
        "precision": failing(0),
        "recall": failing(1),
        "f1": failing(2),
    }
    scored = np.array([r.human.score is not None for r in rows])
    if scored.sum() >= 3:
        # Items people did not score weigh nothing in ρ; they still count in the resamples.
        unit = np.array([r.human.unit_score if r.human.score is not None else 0.0 for r in rows])
        rho = stats.spearman(unit, np.array([r.judge.score for r in rows]))
        named["spearman"] = lambda w: rho(w * scored)
    estimates = dict(zip(named, bootstrap.estimates(*named.values())))
    return {
        "metric": group.metric,
        "evaluator": group.evaluator,
        "revision": group.revision,
        "n": len(rows),
        "traces": len(traces),
        "kappa_kind": kappa_kind,
        "failing": "the failing categories" if _on_categories(rows) else "the failing class",
        "scale": str(scale) if scale is not None else None,
        **{name: estimate.as_dict() for name, estimate in estimates.items()},
        "spearman": estimates["spearman"].as_dict() if "spearman" in estimates else None,
        "confusion": _confusion(rows, classes),
        "scale_confusion": _scale_confusion(rows, scale) if scale is not None else None,
        "best_threshold": _best_threshold(group, resamples, seed),
        "human_kappa": _human_kappa(rows, resamples, seed),
        "consistency": _consistency(rows, group.threshold),
        "disagreements": [_disagreement(row) for row in disagreements(rows)],
    }


def _on_categories(rows: Sequence[Compared]) -> bool:
    return any(row.judge.category is not None and row.judge_class == row.judge.category for row in rows)


def disagreements(rows: Sequence[Compared]) -> list[Compared]:
    """Rows where the person's class is not the judge's, the farthest apart first."""
    differing = [row for row in rows if row.human_class != row.judge_class]
    return sorted(differing, key=lambda r: (-r.severity, r.judge.trace_id, r.human.source))


def _confusion(rows: Sequence[Compared], classes: Sequence[str]) -> dict[str, dict[str, int]]:
    confusion = {h: dict.fromkeys(classes, 0) for h in classes}
    for row in rows:
        confusion[row.human_class][row.judge_class] += 1
    return confusion


def _scale_confusion(rows: Sequence[Compared], scale: Scale) -> dict[str, dict[str, int]]:
    points = [f"{scale.low + i:g}" for i in range(scale.points)]
    confusion = {p: dict.fromkeys(points, 0) for p in points}
    for row in rows:
        confusion[f"{row.human.score:g}"][points[scale.point_of_unit(row.judge.score)]] += 1
    return confusion


def _best_threshold(group: Group, resamples: int, seed: int) -> dict[str, Any] | None:
    rows = [row for row in group.rows if row.human_class in (PASS, FAIL)]
    if len({row.judge.score for row in rows}) < 2:
        return None  # no labels to fit a cut to, or one score: no cut tells anything apart
    traces = {trace: i for i, trace in enumerate(sorted({row.judge.trace_id for row in rows}))}
    human_pass = np.array([row.human_class == PASS for row in rows])
    scores = np.array([row.judge.score for row in rows])
    bootstrap = stats.Bootstrap(np.array([traces[row.judge.trace_id] for row in rows]), resamples, seed)
    best = bootstrap.estimate(stats.best_threshold(human_pass, scores))
    observed = np.ones((1, len(rows)))
    configured = group.threshold

    def kappa_at(threshold: float) -> float | None:
        value = stats.kappa_by_threshold(observed, human_pass, scores, np.array([threshold]))[0, 0]
        return float(value) if np.isfinite(value) else None

    return {
        **best.as_dict(),
        "kappa": kappa_at(best.estimate) if np.isfinite(best.estimate) else None,
        "configured": configured,
        "kappa_at_configured": kappa_at(configured) if configured is not None else None,
    }


def _human_kappa(rows: Sequence[Compared], resamples: int, seed: int) -> dict[str, Any] | None:
    """κ between people on the items two or more of them labelled, every pair of people
    on an item counted once."""
    by_item: dict[tuple[str, str], dict[str, HumanLabel]] = defaultdict(dict)
    for row in rows:
        person = row.human.annotator or row.human.source  # unnamed labels count as different people
        by_item[(row.judge.trace_id, row.judge.span_id)][person] = row.human
    pairs = [
        (trace, a, b)
        for (trace, _), people in by_item.items()
        for (_, a), (_, b) in itertools.combinations(sorted(people.items()), 2)
    ]
    if not pairs:
        return None
    threshold = rows[0].judge.threshold if rows[0].judge.threshold is not None else DEFAULT_THRESHOLD
    traces = {trace: i for i, trace in enumerate(sorted({trace for trace, _, _ in pairs}))}
    bootstrap = stats.Bootstrap(np.array([traces[trace] for trace, _, _ in pairs]), resamples, seed)
    scale = ordinal_scale(label for _, a, b in pairs for label in (a, b))
    if scale is not None:
        first = _points((a for _, a, _ in pairs), scale)
        second = _points((b for _, _, b in pairs), scale)
        k, disagreement = scale.points, stats.quadratic_weights(scale.points)
    else:
        verdicts = [(a.verdict(threshold), b.verdict(threshold)) for _, a, b in pairs]
        classes = classes_of(itertools.chain.from_iterable(verdicts))
        index = {name: i for i, name in enumerate(classes)}
        first = np.array([index[a] for a, _ in verdicts])
        second = np.array([index[b] for _, b in verdicts])
        k, disagreement = len(classes), stats.nominal_weights(len(classes))
    estimate = bootstrap.estimate(lambda w: stats.kappa(stats.tables(w, first, second, k), disagreement))
    items = sum(1 for people in by_item.values() if len(people) > 1)
    return {**estimate.as_dict(), "items": items, "pairs": len(pairs)}


def _consistency(rows: Sequence[Compared], threshold: float | None) -> dict[str, Any] | None:
    """How the judge's trials spread on the items it was asked about more than once."""
    seen: dict[tuple[str, str], JudgeScore] = {}
    for row in rows:
        if len(row.judge.trial_scores) > 1:
            seen[(row.judge.trace_id, row.judge.span_id)] = row.judge
    if not seen:
        return None
    cut = threshold if threshold is not None else DEFAULT_THRESHOLD
    spreads = [float(np.std(s.trial_scores)) for s in seen.values()]  # population standard deviation
    split = [len({score >= cut for score in s.trial_scores}) > 1 for s in seen.values()]
    return {
        "items": len(seen),
        "trials": statistics.median(len(s.trial_scores) for s in seen.values()),
        "mean_stdev": statistics.fmean(spreads),
        "max_stdev": max(spreads),
        "split_rate": sum(split) / len(split),
    }


def _disagreement(row: Compared) -> dict[str, Any]:
    return {
        "trace_id": row.judge.trace_id,
        "span_id": row.judge.span_id,
        "span_name": row.judge.span_name,
        "judge_score": row.judge.score,
        "judge_label": row.judge_class,
        "judge_explanation": row.judge.explanation,
        "human_label": row.human_class,
        "human_score": row.human.score,
        "human_scale": str(row.human.scale) if row.human.score is not None else None,
        "annotator": row.human.annotator,
        "note": row.human.note,
        "source": row.human.source,
        "severity": round(row.severity, 4),
    }
