"""Scoring failure localization against people's labels: TRAIL's measures and Who&When's.

Pure arithmetic over labels already read; no files, no model calls.

TRAIL (Patronus AI, "TRAIL: Trace Reasoning and Agentic Issue Localization"). The
arithmetic follows its scorer, `calculate_scores.py` (`calculate_metrics` and `main`;
read as mirrored in GitHub JuneHou/CausalError, benchmarking/eval/), quirks included:

- per trace, location accuracy = |gold locations ∩ predicted locations| / |gold
  locations| and joint accuracy = |gold (location, category) pairs ∩ predicted pairs| /
  |gold pairs|, all as sets: a location or pair given twice counts once, on both sides;
- a trace with no gold errors scores 0 on both (not 1, and it is not skipped), and an
  empty prediction scores 0 (that scorer counts a missing or unreadable answer as empty);
- the set's accuracies are the plain means over every trace given;
- an error with an empty category keeps its location but loses its category, and pairs
  are made by position from the remaining categories: every later error is paired with
  the next one's category, and the last location(s) get no pair;
- category F1 is computed once over the whole set, not per trace: each trace is one row
  of 21 bits (the categories its errors name), and the F1 of each category over the rows
  is averaged weighted by its support, the number of traces whose gold names it
  (scikit-learn's f1_score(average="weighted", zero_division=0) on those rows). A
  category outside the 21 sets no bit: an unknown predicted category is not a false
  positive there, only a miss in the joint accuracy; no gold category at all gives 0.

Category labels are matched to the taxonomy before comparing: by default with
`taxonomy().from_label`, or with `trail_match`, TRAIL's own rule exactly (lowercase,
strip, equal or equal without spaces, else the label without spaces contained in a
category's name without spaces, first in TRAIL's list order). On every gold label of
the TRAIL release the two agree; they differ on some spellings a model may write:
`from_label` also ignores hyphens and underscores ("Language only", "Instruction
Noncompliance"), matches the other way round ("Formatting Errors in the output") and
knows the taxonomy's ids ("goal_deviation"), which TRAIL leaves unknown; a blank label
(spaces only) is TRAIL's "Language-only" (the empty string is a substring of every name)
and unknown to `from_label`. An unknown label stays its own string, prefixed "?" so it
never equals a category id: wrong unless the other side wrote the same unknown label.

Who&When (Zhang et al., ICML 2025). Its `Automated_FA/evaluate.py` counts, over every
run of the set (a run without a usable prediction counts as wrong), a run's agent as
right when the labelled `mistake_agent` is a substring of the predicted name (case-
sensitive; the name parsed as the first run of word characters after "Agent Name:") and
its step as right when the labelled step's decimal digits are a substring of the
predicted step's (so 3 matches 13). `upstream_*` reproduce that exactly. The headline
measures here are stricter: the agent when the names are equal ignoring case and a
trailing parenthesis ("Orchestrator (-> WebSurfer)" and "Orchestrator (thought)" are
"Orchestrator": the Hand-Crafted runs name their steps so, and label some agents
"Websurfer"), the step when the indices are equal, and within ±k when they differ by at
most k; every run divides, a run without a prediction is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from spanscore.processors.localization.taxonomy import Category, taxonomy

Error = tuple[str, str]  # (location: the span id where the error shows, category label)
Matcher = Callable[[str], Category | None]
UNKNOWN_PREFIX = "?"

# TRAIL's category list in its scorer's order: the order its substring match tries them.
TRAIL_ORDER: tuple[str, ...] = (
    "Language-only",
    "Tool-related",
    "Poor Information Retrieval",
    "Incorrect Memory Usage",
    "Tool Output Misinterpretation",
    "Incorrect Problem Identification",
    "Tool Selection Errors",
    "Formatting Errors",
    "Instruction Non-compliance",
    "Tool Definition Issues",
    "Environment Setup Errors",
    "Rate Limiting",
    "Authentication Errors",
    "Service Errors",
    "Resource Not Found",
    "Resource Exhaustion",
    "Timeout Issues",
    "Context Handling Failures",
    "Resource Abuse",
    "Goal Deviation",
    "Task Orchestration",
)


# -- categories ------------------------------------------------------------------------


def from_label(label: str) -> Category | None:
    """The project's matcher (`Taxonomy.from_label`): the default."""
    return taxonomy().from_label(label)


def trail_match(label: str) -> Category | None:
    """TRAIL's `normalize_category`, exactly, over its 21 names in its order."""
    by_trail = {category.trail: category for category in taxonomy().categories.values()}
    wanted = label.lower().strip()
    no_spaces = wanted.replace(" ", "")
    for name in TRAIL_ORDER:
        if wanted == name.lower() or no_spaces == name.lower().replace(" ", ""):
            return by_trail[name]
    for name in TRAIL_ORDER:
        if no_spaces in name.lower().replace(" ", ""):
            return by_trail[name]
    return None


def category_key(label: str, match: Matcher = from_label) -> str:
    """A category id, or for a label no category matches, "?" + the label lowercased and
    stripped (TRAIL keeps such a label as that string)."""
    category = match(label)
    return category.id if category is not None else UNKNOWN_PREFIX + label.lower().strip()


# -- TRAIL -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceAccuracy:
    location: float
    joint: float


@dataclass(frozen=True)
class CategoryF1:
    precision: float
    recall: float
    f1: float
    support: int  # traces whose gold names the category


@dataclass(frozen=True)
class TrailScores:
    traces: int
    location_accuracy: float  # mean over traces
    joint_accuracy: float  # mean over traces
    weighted_f1: float
    per_trace: tuple[TraceAccuracy, ...]
    categories: dict[str, CategoryF1] = field(default_factory=dict)  # by id, taxonomy order


def _keys(errors: Sequence[Error], match: Matcher) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(locations, category keys, pairs) of one side, as TRAIL builds them: empty
    categories are dropped from the keys only, and pairs zip what is left by position."""
    locations = [location for location, _ in errors]
    keys = [category_key(label, match) for _, label in errors if label]
    return locations, keys, list(zip(locations, keys))


def trace_accuracy(gold: Sequence[Error], predicted: Sequence[Error], match: Matcher = from_label) -> TraceAccuracy:
    """TRAIL's location and joint accuracy of one trace (0 for both without gold errors)."""
    gold_locations, _, gold_pairs = _keys(gold, match)
    predicted_locations, _, predicted_pairs = _keys(predicted, match)
    gold_location_set, gold_pair_set = set(gold_locations), set(gold_pairs)
    location = len(gold_location_set & set(predicted_locations)) / len(gold_location_set) if gold_locations else 0.0
    joint = len(gold_pair_set & set(predicted_pairs)) / len(gold_pair_set) if gold_pairs else 0.0
    return TraceAccuracy(location=location, joint=joint)


def category_rows(
    traces: Sequence[tuple[Sequence[Error], Sequence[Error]]], match: Matcher = from_label
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(category ids, gold rows, predicted rows): one boolean row per trace, one column per
    taxonomy category, set when the trace's errors name it (unknown labels set none)."""
    ids = list(taxonomy().categories)
    column = {category_id: i for i, category_id in enumerate(ids)}
    gold = np.zeros((len(traces), len(ids)), dtype=bool)
    predicted = np.zeros((len(traces), len(ids)), dtype=bool)
    for row, (gold_errors, predicted_errors) in enumerate(traces):
        for rows, errors in ((gold, gold_errors), (predicted, predicted_errors)):
            for key in _keys(errors, match)[1]:
                if key in column:
                    rows[row, column[key]] = True
    return ids, gold, predicted


def weighted_f1(gold: np.ndarray, predicted: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(weighted F1, per-column precision, recall, F1) of boolean rows, as scikit-learn's
    f1_score(average="weighted", zero_division=0) on multilabel rows: per column F1 =
    2tp / (2tp + fp + fn) (0 when that is 0/0), weighted by the column's support (its
    gold count); 0 when no column has support."""
    gold, predicted = gold.astype(bool), predicted.astype(bool)
    tp = (gold & predicted).sum(axis=0).astype(np.float64)
    fp = (~gold & predicted).sum(axis=0).astype(np.float64)
    fn = (gold & ~predicted).sum(axis=0).astype(np.float64)
    precision = np.divide(tp, tp + fp, out=np.zeros_like(tp), where=(tp + fp) > 0)
    recall = np.divide(tp, tp + fn, out=np.zeros_like(tp), where=(tp + fn) > 0)
    f1 = np.divide(2 * tp, 2 * tp + fp + fn, out=np.zeros_like(tp), where=(2 * tp + fp + fn) > 0)
    support = gold.sum(axis=0).astype(np.float64)
    total = support.sum()
    return (float((f1 * support).sum() / total) if total else 0.0), precision, recall, f1


def trail_scores(traces: Sequence[tuple[Sequence[Error], Sequence[Error]]], match: Matcher = from_label) -> TrailScores:
    """TRAIL's measures over a set of traces, each (gold errors, predicted errors)."""
    per_trace = tuple(trace_accuracy(gold, predicted, match) for gold, predicted in traces)
    ids, gold_rows, predicted_rows = category_rows(traces, match)
    f1, precision, recall, per_category = weighted_f1(gold_rows, predicted_rows)
    support = gold_rows.sum(axis=0)
    count = len(per_trace)
    return TrailScores(
        traces=count,
        location_accuracy=sum(t.location for t in per_trace) / count if count else 0.0,
        joint_accuracy=sum(t.joint for t in per_trace) / count if count else 0.0,
        weighted_f1=f1,
        per_trace=per_trace,
        categories={
            category_id: CategoryF1(float(precision[i]), float(recall[i]), float(per_category[i]), int(support[i]))
            for i, category_id in enumerate(ids)
        },
    )


# -- Who&When --------------------------------------------------------------------------

Attribution = tuple[str, int]  # (agent name, step index into the run's history)

_ADDRESSEE = re.compile(r"\s*\([^()]*\)\s*$")  # "Orchestrator (-> WebSurfer)", "... (thought)"
_WORD = re.compile(r"\w+")  # what evaluate.py's "Agent Name:\s*([\w_]+)" keeps of a name


@dataclass(frozen=True)
class WhoWhenScores:
    runs: int
    agent_accuracy: float  # names equal ignoring case and an addressee suffix
    step_accuracy: float  # step indices equal
    step_within: dict[int, float]  # k -> share of runs with |predicted - labelled| <= k
    upstream_agent_accuracy: float  # evaluate.py: labelled name a substring of the predicted
    upstream_step_accuracy: float  # evaluate.py: labelled digits a substring of the predicted


def agent_base(name: str) -> str:
    """The agent a step name names, for comparison: without a trailing parenthesis
    (Magentic-One's "(thought)", "(-> WebSurfer)"), stripped and case-folded."""
    return _ADDRESSEE.sub("", name).strip().casefold()


def agent_matches(labelled: str, predicted: str) -> bool:
    return agent_base(labelled) == agent_base(predicted)


def upstream_matches(labelled: Attribution, predicted: Attribution | None) -> tuple[bool, bool]:
    """(agent right, step right) as evaluate.py counts them. Its parser keeps only the
    first run of word characters of the name and only digits for the step: a prediction
    it could not parse in full (no word character, a negative step) is no prediction."""
    if predicted is None:
        return False, False
    word = _WORD.search(predicted[0])
    if word is None or predicted[1] < 0:
        return False, False
    return labelled[0] in word.group(0), str(labelled[1]) in str(predicted[1])


def whowhen_scores(
    runs: Sequence[tuple[Attribution, Attribution | None]], within: Iterable[int] = (1, 2, 3)
) -> WhoWhenScores:
    """Who&When's measures over a set of runs, each (labelled, predicted or None)."""
    count = len(runs)
    tolerances = sorted(set(within))
    if any(k < 0 for k in tolerances):
        raise ValueError("a step tolerance is at least 0")
    agent = step = upstream_agent = upstream_step = 0
    near: dict[int, int] = dict.fromkeys(tolerances, 0)
    for labelled, predicted in runs:
        right_agent, right_step = upstream_matches(labelled, predicted)
        upstream_agent += right_agent
        upstream_step += right_step
        if predicted is None:
            continue
        agent += agent_matches(labelled[0], predicted[0])
        distance = abs(predicted[1] - labelled[1])
        step += distance == 0
        for k in tolerances:
            near[k] += distance <= k

    def share(n: int) -> float:
        return n / count if count else 0.0

    return WhoWhenScores(
        runs=count,
        agent_accuracy=share(agent),
        step_accuracy=share(step),
        step_within={k: share(n) for k, n in near.items()},
        upstream_agent_accuracy=share(upstream_agent),
        upstream_step_accuracy=share(upstream_step),
    )
