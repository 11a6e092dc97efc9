"""Agent reliability (max-compose + top-k tail risk) and agent consistency (weighted RMS)."""

from __future__ import annotations

import math

import pytest

from spanscore.processors.metrics import DEFAULT_SIGNAL_WEIGHTS, agent_consistency, agent_reliability
from spanscore.processors.metrics.session_risk import top_k

DEFAULTS = {"confidence": 1.0, "loop_detection": 1.0, "tool_correctness": 0.8, "coherence": 1.0}

# The example trace of docs/metrics.md (agent_consistency): risks 0.12 / 0.05 / 0.08 / 0.03.
SEED_TRACE = {"confidence": 0.88, "loop_detection": 0.95, "tool_correctness": 0.92, "coherence": 0.97}


def confidences(*scores: float) -> dict[str, dict[str, float]]:
    """A session t1, t2, ... whose traces carry only a confidence signal."""
    return {f"t{i}": {"confidence": score} for i, score in enumerate(scores, start=1)}


def test_default_weights_are_the_seeds():
    assert dict(DEFAULT_SIGNAL_WEIGHTS) == DEFAULTS


# --- agent_reliability ---------------------------------------------------------------


def test_reliability_of_the_seed_example_trace():
    result = agent_reliability({"trace-id-1": SEED_TRACE})
    # step risk = max(1.0 × 0.12, 1.0 × 0.05, 0.8 × 0.08 = 0.064, 1.0 × 0.03) = 0.12
    # n = 1 -> k = 1; raw = 0.9 × 0.12 + 0.1 × 0.12 = 0.12; score = 0.88
    assert result.name == "agent_reliability"
    assert result.score == pytest.approx(0.88)
    assert result.label == "pass"
    assert result.metadata == {
        "total_traces_in_session": 1,
        "traces_evaluated": 1,
        "raw_risk": 0.12,
        "signal_weights": DEFAULTS,
        "per_trace_signals": {
            "trace-id-1": {
                "confidence_risk": 0.12,
                "loop_risk": 0.05,
                "tool_risk": 0.08,
                "coherence_risk": 0.03,
                "step_risk": 0.12,
            },
        },
        "flagged_traces": [],
        "aggregation": {
            "method": "max_compose_top_k",
            "top_k_percentile": 0.15,
            "ensemble_weight": 0.1,
            "mean_top_k_risk": 0.12,
            "max_risk": 0.12,
        },
    }


@pytest.mark.parametrize(("n", "k"), [(1, 1), (6, 1), (7, 2), (20, 3), (0, 1), (100, 15), (101, 16)])
def test_top_k_is_ceil_of_fifteen_percent_at_least_one(n, k):
    # 1 × 0.15 = 0.15 -> 1; 6 × 0.15 = 0.9 -> 1; 7 × 0.15 = 1.05 -> 2; 20 × 0.15 = 3 -> 3;
    # 100 × 0.15 = 15 -> 15; 101 × 0.15 = 15.15 -> 16
    assert top_k(n) == k


def test_reliability_of_six_traces_takes_the_single_worst():
    result = agent_reliability(confidences(0.2, 0.4, 1.0, 1.0, 1.0, 1.0))
    # risks 0.8, 0.6, 0, 0, 0, 0; k = 1 -> mean_top_k 0.8; raw = 0.9 × 0.8 + 0.1 × 0.8 = 0.8 -> 0.2
    # (k = 2 would give mean 0.7, raw 0.71, score 0.29)
    assert result.score == pytest.approx(0.2)
    assert result.metadata["aggregation"]["mean_top_k_risk"] == 0.8


def test_reliability_of_seven_traces_takes_the_two_worst():
    result = agent_reliability(confidences(0.9, 0.8, 0.3, 0.6, 0.95, 0.1, 0.7))
    # risks 0.1, 0.2, 0.7, 0.4, 0.05, 0.9, 0.3 -> sorted 0.9, 0.7, ...; k = 2
    # mean_top_k = (0.9 + 0.7) / 2 = 0.8; raw = 0.9 × 0.8 + 0.1 × 0.9 = 0.81 -> score 0.19
    assert result.score == pytest.approx(0.19)
    assert result.metadata["raw_risk"] == 0.81
    assert result.metadata["aggregation"]["mean_top_k_risk"] == 0.8
    assert result.metadata["aggregation"]["max_risk"] == 0.9
    # flagged: risk > 0.5, in session order
    assert result.metadata["flagged_traces"] == ["t3", "t6"]
    assert result.label == "fail"


def test_reliability_of_twenty_traces_takes_the_three_worst():
    result = agent_reliability(confidences(0.1, 0.4, 0.7, 0.8, *[1.0] * 16))
    # risks 0.9, 0.6, 0.3, 0.2, 0 × 16; k = 3 -> mean (0.9 + 0.6 + 0.3) / 3 = 0.6
    # raw = 0.9 × 0.6 + 0.1 × 0.9 = 0.63 -> score 0.37 (k = 4 would give 0.46)
    assert result.score == pytest.approx(0.37)
    assert result.metadata["traces_evaluated"] == 20


def test_per_trace_risk_is_the_worst_weighted_signal():
    result = agent_reliability(
        {
            # tool risk 0.7 × 0.8 = 0.56 > confidence risk 0.1 -> step 0.56, flagged
            "t1": {"confidence": 0.9, "tool_correctness": 0.3},
            # tool risk 0.6 × 0.8 = 0.48 -> step 0.48, not flagged although its raw tool risk is 0.6
            "t2": {"confidence": 0.9, "tool_correctness": 0.4},
        }
    )
    signals = result.metadata["per_trace_signals"]
    assert signals["t1"] == {"confidence_risk": 0.1, "tool_risk": 0.7, "step_risk": 0.56}
    assert signals["t2"] == {"confidence_risk": 0.1, "tool_risk": 0.6, "step_risk": 0.48}
    assert result.metadata["flagged_traces"] == ["t1"]
    # n = 2 -> k = 1: raw = 0.9 × 0.56 + 0.1 × 0.56 = 0.56 -> score 0.44
    assert result.score == pytest.approx(0.44)


def test_a_risk_of_exactly_one_half_is_not_flagged():
    result = agent_reliability(confidences(0.5, 0.49))
    # risks 0.5 (not > 0.5) and 0.51 (> 0.5)
    assert result.metadata["flagged_traces"] == ["t2"]


def test_missing_signals_are_skipped_not_read_as_zero():
    result = agent_reliability({"t1": {"confidence": 0.9}, "t2": {"coherence": 0.4}})
    # t1 risk 0.1 (a missing coherence would otherwise be risk 1); t2 only coherence: 0.6
    assert result.metadata["per_trace_signals"] == {
        "t1": {"confidence_risk": 0.1, "step_risk": 0.1},
        "t2": {"coherence_risk": 0.6, "step_risk": 0.6},
    }
    # n = 2 -> k = 1: raw = 0.9 × 0.6 + 0.1 × 0.6 = 0.6 -> score 0.4
    assert result.score == pytest.approx(0.4)


def test_reliability_skips_traces_without_known_signals():
    result = agent_reliability(
        {
            "t1": {"confidence": 0.7},
            "t2": {"task_completion": 0.0},  # not a reliability signal
            "t3": {},
        }
    )
    assert result.metadata["total_traces_in_session"] == 3
    assert result.metadata["traces_evaluated"] == 1
    assert list(result.metadata["per_trace_signals"]) == ["t1"]
    assert result.score == pytest.approx(0.7)  # raw = 0.9 × 0.3 + 0.1 × 0.3 = 0.3
    assert "(2 without signals skipped)" in result.explanation


def test_reliability_weights_override_the_defaults():
    session = {"t1": {"confidence": 0.9, "tool_correctness": 0.4}}
    # default: max(0.1, 0.8 × 0.6 = 0.48) = 0.48 -> 0.52
    assert agent_reliability(session).score == pytest.approx(0.52)
    # tool weight 1.0: max(0.1, 0.6) = 0.6 -> 0.4; the other weights keep their defaults
    result = agent_reliability(session, weights={"tool_correctness": 1.0})
    assert result.score == pytest.approx(0.4)
    assert result.metadata["signal_weights"] == {**DEFAULTS, "tool_correctness": 1.0}
    # weight 0 silences a signal: max(0.1, 0) = 0.1 -> 0.9
    assert agent_reliability(session, weights={"tool_correctness": 0}).score == pytest.approx(0.9)


def test_reliability_is_clamped_to_zero():
    # weight 2 doubles the risk: 2 × 1.0 = 2 -> raw 2 -> 1 - 2 = -1, clamped to 0
    result = agent_reliability(confidences(0.0), weights={"confidence": 2.0})
    assert result.score == 0.0
    assert result.metadata["raw_risk"] == 2.0


def test_reliability_passes_at_equality_with_the_threshold():
    # risk 0.5 -> raw = 0.9 × 0.5 + 0.1 × 0.5 = 0.5 -> score 0.5
    assert agent_reliability(confidences(0.5)).score == 0.5
    assert agent_reliability(confidences(0.5)).passed
    assert not agent_reliability(confidences(0.5), threshold=0.51).passed


# --- agent_consistency ---------------------------------------------------------------


def test_consistency_of_the_seed_example_trace_follows_the_formula():
    result = agent_consistency({"trace-id-1": SEED_TRACE})
    # penalty = 1.0 × 0.05 + 0.8 × 0.08 + 1.0 × 0.03 = 0.144 (0.134 in the original description; the formula wins)
    # wu = (1 + 0.144) × (1.0 × 0.12) = 1.144 × 0.12 = 0.13728
    # rms of one value = 0.13728 -> score = 1 - 0.13728 = 0.86272
    assert result.name == "agent_consistency"
    assert result.score == pytest.approx(0.86272, abs=1e-12)
    assert result.metadata == {
        "total_traces_in_session": 1,
        "traces_evaluated": 1,
        "raw_instability": 0.1373,
        "signal_weights": DEFAULTS,
        "per_trace_signals": {
            "trace-id-1": {
                "confidence_risk": 0.12,
                "loop_risk": 0.05,
                "tool_risk": 0.08,
                "coherence_risk": 0.03,
                "situational_penalty": 0.144,
                "weighted_uncertainty": 0.1373,
            },
        },
        "aggregation": {"method": "weighted_rms", "rms_value": 0.1373},
    }


def test_consistency_is_the_root_mean_square_of_weighted_uncertainty():
    result = agent_consistency(confidences(0.7, 0.6))
    # no other signals: penalty 0, wu = 0.3 and 0.4; rms = sqrt((0.09 + 0.16) / 2) = sqrt(0.125) = 0.35355
    assert result.score == pytest.approx(1 - math.sqrt(0.125))
    assert result.metadata["raw_instability"] == 0.3536


def test_equal_uncertainties_give_their_common_value():
    # docs/metrics.md: equal uncertainties give their common value
    assert agent_consistency(confidences(0.7, 0.7, 0.7)).score == pytest.approx(0.7)


def test_other_signals_amplify_the_confidence_risk():
    result = agent_consistency({"t1": {"confidence": 0.8, "tool_correctness": 0.5, "loop_detection": 0.9}})
    # penalty = 1.0 × 0.1 + 0.8 × 0.5 = 0.5; wu = 1.5 × 0.2 = 0.3 -> score 0.7
    assert result.score == pytest.approx(0.7)
    assert result.metadata["per_trace_signals"]["t1"] == {
        "confidence_risk": 0.2,
        "loop_risk": 0.1,
        "tool_risk": 0.5,
        "situational_penalty": 0.5,
        "weighted_uncertainty": 0.3,
    }


def test_full_confidence_is_never_amplified():
    # confidence risk 0: wu = (1 + 1.0 + 0.8 + 1.0) × 0 = 0 -> score 1
    session = {"t1": {"confidence": 1.0, "loop_detection": 0.0, "tool_correctness": 0.0, "coherence": 0.0}}
    assert agent_consistency(session).score == 1.0


def test_consistency_skips_traces_without_confidence():
    # t2 has only coherence: reliability evaluates it, consistency does not.
    session = {"t1": {"confidence": 0.9}, "t2": {"coherence": 0.4}}
    consistency = agent_consistency(session)
    assert consistency.metadata["traces_evaluated"] == 1
    assert list(consistency.metadata["per_trace_signals"]) == ["t1"]
    assert consistency.score == pytest.approx(0.9)  # wu = 0.1
    assert "(1 without a confidence signal skipped)" in consistency.explanation
    assert agent_reliability(session).metadata["traces_evaluated"] == 2


def test_consistency_weights_override_the_defaults():
    session = {"t1": {"confidence": 0.8, "coherence": 0.5}}
    # default: penalty 0.5, wu = 1.5 × 1.0 × 0.2 = 0.3 -> 0.7
    assert agent_consistency(session).score == pytest.approx(0.7)
    # confidence weight 0.5, coherence weight 2: penalty 1.0, wu = 2.0 × 0.5 × 0.2 = 0.2 -> 0.8
    result = agent_consistency(session, weights={"confidence": 0.5, "coherence": 2.0})
    assert result.score == pytest.approx(0.8)
    assert result.metadata["signal_weights"] == {**DEFAULTS, "confidence": 0.5, "coherence": 2.0}


def test_consistency_is_clamped_to_zero():
    # penalty = 1.0 × 1 = 1, wu = 2 × 1 = 2 -> 1 - 2 = -1, clamped to 0
    result = agent_consistency({"t1": {"confidence": 0.0, "loop_detection": 0.0}})
    assert result.score == 0.0
    assert result.metadata["raw_instability"] == 2.0


def test_consistency_passes_at_equality_with_the_threshold():
    # wu = 0.5 -> rms = sqrt(0.25) = 0.5 -> score 0.5
    assert agent_consistency(confidences(0.5)).score == 0.5
    assert agent_consistency(confidences(0.5)).passed
    assert not agent_consistency(confidences(0.5), threshold=0.500001).passed


# --- edge cases and validation, both metrics -------------------------------------------

METRICS = pytest.mark.parametrize("metric", [agent_reliability, agent_consistency])


@METRICS
@pytest.mark.parametrize("session", [{}, {"t1": {}, "t2": {}}])
def test_no_traces_or_no_signals_score_one(metric, session):
    result = metric(session)
    assert result.score == 1.0
    assert result.explanation == "No traces or signals to evaluate."
    assert result.metadata == {
        "total_traces_in_session": len(session),
        "traces_evaluated": 0,
        "signal_weights": DEFAULTS,
    }


@METRICS
def test_no_evaluable_traces_score_one(metric):
    result = metric({"t1": {"task_completion": 0.1}, "t2": {}})
    assert result.score == 1.0
    assert result.explanation == "No evaluable traces."
    assert result.metadata["total_traces_in_session"] == 2
    assert result.metadata["traces_evaluated"] == 0


def test_consistency_without_any_confidence_has_no_evaluable_traces():
    assert agent_consistency({"t1": {"coherence": 0.2}}).explanation == "No evaluable traces."


@METRICS
def test_unknown_signals_are_ignored(metric):
    with_extra = metric({"t1": {"confidence": 0.6, "task_completion": 0.0, "plan_quality": "n/a"}})
    assert with_extra == metric({"t1": {"confidence": 0.6}})


@METRICS
@pytest.mark.parametrize("bad", [1.2, -0.1, math.nan, math.inf, -math.inf])
def test_known_signals_outside_the_unit_interval_are_rejected(metric, bad):
    with pytest.raises(ValueError, match=r"signal 'coherence' of trace 't2' must be within \[0, 1\]"):
        metric({"t1": {"confidence": 0.5}, "t2": {"confidence": 0.5, "coherence": bad}})


@METRICS
@pytest.mark.parametrize("bad", ["0.5", None, True])
def test_known_signals_that_are_not_numbers_are_rejected(metric, bad):
    with pytest.raises(TypeError, match="signal 'confidence' of trace 't1' must be a number"):
        metric({"t1": {"confidence": bad}})


@METRICS
def test_signals_of_a_trace_must_be_a_mapping(metric):
    with pytest.raises(TypeError, match="signals of trace 't1' must be a mapping"):
        metric({"t1": [0.5]})


@METRICS
def test_signal_bounds_are_inclusive(metric):
    assert metric({"t1": {"confidence": 0.0}, "t2": {"confidence": 1.0}}).metadata["traces_evaluated"] == 2


@METRICS
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"confidnce": 1.0}, "unknown signal weight 'confidnce'"),
        ({"task_completion": 1.0}, "unknown signal weight 'task_completion'"),
        ({"coherence": -0.1}, "must be finite and non-negative"),
        ({"coherence": math.nan}, "must be finite and non-negative"),
        ({"coherence": math.inf}, "must be finite and non-negative"),
        ({"coherence": "1"}, "must be a number"),
        ({"coherence": True}, "must be a number"),
    ],
)
def test_invalid_weights_are_rejected(metric, weights, message):
    with pytest.raises(ValueError, match=message):
        metric(confidences(0.5), weights=weights)


@METRICS
def test_weights_are_checked_even_when_there_is_nothing_to_evaluate(metric):
    with pytest.raises(ValueError, match="unknown signal weight"):
        metric({}, weights={"nope": 1.0})


@METRICS
def test_single_trace_is_evaluated_normally(metric):
    result = metric(confidences(0.75))
    # reliability: k = 1, raw = 0.25 -> 0.75; consistency: rms of 0.25 -> 0.75
    assert result.score == pytest.approx(0.75)
    assert result.metadata["traces_evaluated"] == 1


@METRICS
def test_per_trace_signals_keep_session_order(metric):
    session = {"t9": {"confidence": 0.9}, "t1": {"confidence": 0.2}, "t5": {"confidence": 0.5}}
    assert list(metric(session).metadata["per_trace_signals"]) == ["t9", "t1", "t5"]


@METRICS
def test_score_is_not_rounded(metric):
    # reliability: raw = 0.12345 -> 0.87655; consistency: rms of 0.12345 -> 0.87655
    result = metric(confidences(0.87655))
    assert result.score == pytest.approx(0.87655, abs=1e-12)
    assert result.score != round(result.score, 4)
