"""TRAIL's and Who&When's localization measures against hand computations."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from spanscore.offline import localization_scoring as scoring
from spanscore.processors.localization.taxonomy import taxonomy

ROOT = Path(__file__).resolve().parents[2]
TRAIL_LABELS = ROOT / "tests" / "fixtures" / "trail" / "gaia-5.annotations.jsonl"

FMT, TIMEOUT, GOAL, TASK = "Formatting Errors", "Timeout Issues", "Goal Deviation", "Task Orchestration"


def f1_of(scores: scoring.TrailScores, category_id: str) -> float:
    return scores.categories[category_id].f1


# -- TRAIL -----------------------------------------------------------------------------


def test_two_traces_by_hand():
    # Trace 1: gold {a: formatting, b: timeout}, predicted {a: formatting, c: timeout}.
    #   locations {a, b} ∩ {a, c} = {a}: 1/2; pairs (a, fmt) only: 1/2.
    # Trace 2: gold {d: goal deviation}, predicted {d: task orchestration}.
    #   location d: 1/1; pair (d, goal) missed: 0.
    # Means: location (1/2 + 1) / 2 = 3/4; joint (1/2 + 0) / 2 = 1/4.
    # Category rows: trace 1 gold {fmt, timeout} = predicted; trace 2 gold {goal},
    # predicted {task}. F1: fmt 1 (support 1), timeout 1 (1), goal 0 (1), task 0 (0):
    # weighted (1 + 1 + 0) / 3 = 2/3 (location plays no part in it).
    traces = [
        ([("a", FMT), ("b", TIMEOUT)], [("a", FMT), ("c", TIMEOUT)]),
        ([("d", GOAL)], [("d", TASK)]),
    ]
    scores = scoring.trail_scores(traces)
    assert scores.traces == 2
    assert scores.per_trace == (scoring.TraceAccuracy(0.5, 0.5), scoring.TraceAccuracy(1.0, 0.0))
    assert scores.location_accuracy == pytest.approx(0.75)
    assert scores.joint_accuracy == pytest.approx(0.25)
    assert scores.weighted_f1 == pytest.approx(2 / 3)
    assert f1_of(scores, "formatting_error") == 1.0
    assert f1_of(scores, "goal_deviation") == 0.0
    assert scores.categories["goal_deviation"].support == 1
    # Task orchestration: one false positive, no support: precision 0, F1 0, weight 0.
    assert scores.categories["task_orchestration"] == scoring.CategoryF1(0.0, 0.0, 0.0, 0)


def test_empty_prediction_scores_zero():
    # Gold {a: fmt}, nothing predicted: location 0/1, joint 0/1; fmt F1 0 with support 1.
    scores = scoring.trail_scores([([("a", FMT)], [])])
    assert (scores.location_accuracy, scores.joint_accuracy, scores.weighted_f1) == (0.0, 0.0, 0.0)
    assert scores.categories["formatting_error"].support == 1


def test_trace_without_gold_errors_scores_zero_and_counts_in_the_mean():
    # TRAIL's quirk: no gold errors gives 0 and 0 (even for an empty prediction), and
    # the trace still divides the mean: (1 + 0) / 2 = 1/2 for both accuracies.
    # F1 over rows {fmt}/{fmt} and {}/{}: fmt 1 with support 1 -> 1.
    scores = scoring.trail_scores([([("a", FMT)], [("a", FMT)]), ([], [])])
    assert scores.per_trace[1] == scoring.TraceAccuracy(0.0, 0.0)
    assert scores.location_accuracy == pytest.approx(0.5)
    assert scores.joint_accuracy == pytest.approx(0.5)
    assert scores.weighted_f1 == pytest.approx(1.0)
    # A prediction on a trace without gold errors is no better.
    assert scoring.trace_accuracy([], [("a", FMT)]) == scoring.TraceAccuracy(0.0, 0.0)


def test_no_gold_category_at_all_gives_zero_f1():
    scores = scoring.trail_scores([([], [("a", FMT)])])
    assert scores.weighted_f1 == 0.0
    empty = scoring.trail_scores([])
    assert (empty.traces, empty.location_accuracy, empty.joint_accuracy, empty.weighted_f1) == (0, 0.0, 0.0, 0.0)


def test_duplicates_count_once():
    # Gold [(a, fmt), (a, fmt), (b, goal)]: locations {a, b}, pairs {(a, fmt), (b, goal)}.
    # Predicted (a, fmt) three times: location 1/2, joint 1/2 (not 3/3 nor 2/3).
    gold = [("a", FMT), ("a", FMT), ("b", GOAL)]
    assert scoring.trace_accuracy(gold, [("a", FMT)] * 3) == scoring.TraceAccuracy(0.5, 0.5)
    # Two gold errors at one span: location {a} 1/1, joint (a, fmt) of {(a, fmt), (a, goal)}: 1/2.
    assert scoring.trace_accuracy([("a", FMT), ("a", GOAL)], [("a", FMT)]) == scoring.TraceAccuracy(1.0, 0.5)


def test_category_spelling_variants():
    # TRAIL's gold spells categories several ways; each finds its category.
    gold = [("a", "Context Handling Failure"), ("b", " Tool Selection"), ("c", " Incorrect Problem Identification")]
    predicted = [
        ("a", "context handling failures"),
        ("b", "Tool Selection Errors"),
        ("c", "incorrect problem identification"),
    ]
    scores = scoring.trail_scores([(gold, predicted)])
    assert scores.per_trace[0] == scoring.TraceAccuracy(1.0, 1.0)
    assert scores.weighted_f1 == pytest.approx(1.0)
    assert scoring.category_key(" Tool Selection") == "tool_selection_error"
    assert scoring.category_key("Context Handling Failure") == "context_handling_failure"


def test_unknown_categories():
    # An unknown label at the right span: location 1, joint 0.
    assert scoring.trace_accuracy([("a", FMT)], [("a", "Made Up Error")]) == scoring.TraceAccuracy(1.0, 0.0)
    # The same unknown label on both sides matches (TRAIL compares the lowercased string).
    assert scoring.trace_accuracy([("a", "Mystery")], [("a", " mystery ")]) == scoring.TraceAccuracy(1.0, 1.0)
    assert scoring.category_key("Made Up Error") == "?made up error"

    # In F1 an unknown label sets no bit. Gold rows {fmt}, {goal}; predicted {fmt, X}, {goal}.
    # X = goal deviation: goal tp 1, fp 1 -> F1 2/3; fmt 1; weighted (1 + 2/3) / 2 = 5/6.
    # X = an unknown label: no false positive -> weighted 1.
    def with_extra(label: str) -> float:
        traces = [([("a", FMT)], [("a", FMT), ("b", label)]), ([("c", GOAL)], [("c", GOAL)])]
        return scoring.trail_scores(traces).weighted_f1

    assert with_extra(GOAL) == pytest.approx(5 / 6)
    assert with_extra("Made Up Error") == pytest.approx(1.0)


def test_unknown_label_never_equals_a_category_id():
    # TRAIL does not know "goal_deviation" (it only ignores spaces): unknown, so wrong
    # against "Goal Deviation", though the string is the taxonomy's id.
    gold, predicted = [("a", GOAL)], [("a", "goal_deviation")]
    assert scoring.trace_accuracy(gold, predicted, scoring.trail_match).joint == 0.0
    assert scoring.category_key("goal_deviation", scoring.trail_match) == "?goal_deviation"
    assert scoring.trail_scores([(gold, predicted)], scoring.trail_match).weighted_f1 == 0.0
    # The project's matcher knows its own ids.
    assert scoring.trace_accuracy(gold, predicted).joint == 1.0


def test_empty_category_shifts_the_pairs():
    # TRAIL drops empty categories but keeps their locations, then pairs by position:
    # gold [(a, ""), (b, fmt), (c, goal)] gives pairs (a, fmt), (b, goal); c has none.
    gold = [("a", ""), ("b", FMT), ("c", GOAL)]
    assert scoring.trace_accuracy(gold, [("a", FMT), ("b", GOAL)]) == scoring.TraceAccuracy(2 / 3, 1.0)
    # The pairs as written miss: joint 0, locations {b, c} of {a, b, c}: 2/3.
    assert scoring.trace_accuracy(gold, [("b", FMT), ("c", GOAL)]) == scoring.TraceAccuracy(2 / 3, 0.0)


def test_trail_match_is_trails_rule():
    # Substring candidates in TRAIL's list order: "Incorrect Memory Usage" comes before
    # "Incorrect Problem Identification" there, after it in the taxonomy file.
    assert scoring.trail_match("Incorrect").id == "incorrect_memory_usage"
    assert scoring.from_label("Incorrect").id == "incorrect_problem_identification"
    assert scoring.trail_match("Tool").id == "tool_related_hallucination"
    # A blank label: the empty string is in every name, so TRAIL gives its first one.
    assert scoring.trail_match("   ").id == "language_only_hallucination"
    assert scoring.from_label("   ") is None
    # Hyphens count for TRAIL, not for the project's matcher.
    assert scoring.trail_match("Language only") is None
    assert scoring.from_label("Language only").id == "language_only_hallucination"
    assert scoring.trail_match("Instruction Noncompliance") is None
    # Only the label inside the name, for TRAIL; either way round for the project's.
    assert scoring.trail_match("Formatting Errors in the output") is None
    assert scoring.from_label("Formatting Errors in the output").id == "formatting_error"


def test_trail_order_names_the_taxonomy():
    assert sorted(scoring.TRAIL_ORDER) == sorted(c.trail for c in taxonomy().categories.values())
    for name in scoring.TRAIL_ORDER:
        assert scoring.trail_match(name).trail == name
        assert scoring.trail_match(name.upper()).trail == name


def test_both_matchers_agree_on_trails_gold_labels():
    labels = [e["category"] for line in TRAIL_LABELS.read_text().splitlines() for e in json.loads(line)["errors"]]
    assert len(labels) > 10
    for label in labels:
        project, trail = scoring.from_label(label), scoring.trail_match(label)
        assert project is not None and trail is not None, label
        assert project.id == trail.id, label


def test_weighted_f1_by_hand():
    # Three traces, columns x, y, z.
    # x: gold 1,1,0 pred 1,0,1 -> tp 1 fp 1 fn 1: F1 2/4 = 1/2, support 2.
    # y: gold 0,1,1 pred 0,1,1 -> F1 1, support 2.
    # z: gold 0,0,0 pred 1,0,0 -> F1 0, support 0.
    # Weighted: (2 * 1/2 + 2 * 1) / 4 = 3/4.
    gold = np.array([[1, 0, 0], [1, 1, 0], [0, 1, 0]], dtype=bool)
    predicted = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0]], dtype=bool)
    f1, precision, recall, per_column = scoring.weighted_f1(gold, predicted)
    assert f1 == pytest.approx(0.75)
    assert per_column.tolist() == pytest.approx([0.5, 1.0, 0.0])
    assert precision.tolist() == pytest.approx([0.5, 1.0, 0.0])
    assert recall.tolist() == pytest.approx([0.5, 1.0, 0.0])


def test_weighted_f1_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(3)
    for _ in range(200):
        # Two columns at least: scikit-learn reads a single column as binary classes.
        # TRAIL's rows always have 21.
        rows, columns = rng.integers(1, 12), rng.integers(2, 22)
        gold = rng.random((rows, columns)) < rng.random()
        predicted = rng.random((rows, columns)) < rng.random()
        expected = metrics.f1_score(gold, predicted, average="weighted", zero_division=0)
        assert scoring.weighted_f1(gold, predicted)[0] == pytest.approx(expected)


def test_trail_scores_f1_matches_scikit_learn_on_category_rows():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = random.Random(5)
    names = [*scoring.TRAIL_ORDER, "Made Up", "Context Handling Failure"]
    traces = [
        (
            [(f"s{rng.randrange(5)}", rng.choice(names)) for _ in range(rng.randrange(4))],
            [(f"s{rng.randrange(5)}", rng.choice(names)) for _ in range(rng.randrange(4))],
        )
        for _ in range(30)
    ]
    _, gold, predicted = scoring.category_rows(traces)
    expected = metrics.f1_score(gold, predicted, average="weighted", zero_division=0)
    assert scoring.trail_scores(traces).weighted_f1 == pytest.approx(expected)


# -- Who&When --------------------------------------------------------------------------

RUNS = [
    # labelled, predicted
    (("WebSurfer", 4), ("Orchestrator (-> WebSurfer)", 3)),  # agent wrong; step off by 1
    (("Orchestrator", 1), ("Orchestrator (thought)", 1)),  # both right
    (("Websurfer", 3), ("WebSurfer", 13)),  # agent right ignoring case; step off by 10
    (("Verification_Expert", 2), None),  # no prediction: wrong everywhere
    (("DataAnalysis_Expert", 5), ("Data", 7)),  # agent wrong; step off by 2
]


def test_whowhen_by_hand():
    # Agent: runs 2 and 3 -> 2/5. Step exact: run 2 -> 1/5.
    # Within ±1: runs 1 (1) and 2 (0) -> 2/5; ±2 adds run 5 (2) -> 3/5; ±10 adds run 3 -> 4/5.
    # evaluate.py: agent, labelled name in the predicted's first word: run 2 only
    # ("WebSurfer" is not in "Orchestrator", "Websurfer" not in "WebSurfer") -> 1/5;
    # step, labelled digits in the predicted's: run 2, and run 3 ("3" in "13") -> 2/5.
    scores = scoring.whowhen_scores(RUNS, within=(2, 1, 10))
    assert scores.runs == 5
    assert scores.agent_accuracy == pytest.approx(0.4)
    assert scores.step_accuracy == pytest.approx(0.2)
    assert scores.step_within == pytest.approx({1: 0.4, 2: 0.6, 10: 0.8})
    assert list(scores.step_within) == [1, 2, 10]
    assert scores.upstream_agent_accuracy == pytest.approx(0.2)
    assert scores.upstream_step_accuracy == pytest.approx(0.4)


def test_whowhen_within_zero_is_exact_step():
    scores = scoring.whowhen_scores(RUNS, within=(0,))
    assert scores.step_within[0] == scores.step_accuracy


def test_whowhen_upstream_parse_failures():
    # evaluate.py reads "Step Number: (\\d+)": a negative step is no prediction, so the
    # agent is not counted either; a name without a word character is none.
    assert scoring.upstream_matches(("A", 1), ("A", -1)) == (False, False)
    assert scoring.upstream_matches(("A", 1), ("->", 1)) == (False, False)
    assert scoring.upstream_matches(("A", 1), ("A", 1)) == (True, True)
    assert scoring.upstream_matches(("Expert", 1), ("Data_Expert", 21)) == (True, True)


def test_whowhen_edges():
    assert scoring.whowhen_scores([]).agent_accuracy == 0.0
    assert scoring.whowhen_scores([]).step_within == {1: 0.0, 2: 0.0, 3: 0.0}
    with pytest.raises(ValueError):
        scoring.whowhen_scores(RUNS, within=(-1,))
    assert scoring.agent_base(" Orchestrator (-> WebSurfer) ") == "orchestrator"
    assert scoring.agent_matches("Verification_Expert", "verification_expert")
    assert not scoring.agent_matches("Verification_Expert", "VerificationExpert")
