"""Session risk: the arithmetic of agent reliability and agent consistency (the `session_metrics` processor runs it).

Both aggregate trace-level signals already scored on the session's traces —
`confidence`, `loop_detection`, `tool_correctness`, `coherence` — into one session
score. They are pure arithmetic: no judge and no embedder calls.

- `agent_reliability` asks "did the agent ever fail badly?": each trace's risk is its
  worst weighted signal risk, and the session's risk is a blend of the mean of the
  riskiest 15% of traces with the single riskiest one.
- `agent_consistency` asks "did the agent perform smoothly?": each trace's confidence
  risk is amplified by its other signals' risks, and the session's instability is the
  root mean square of those, which punishes many moderate deviations.

Input: trace id -> {signal name: score}, in session order. A signal missing from a
trace is skipped, never read as 0. Names other than the four signals are ignored (a
session's scores include every metric, e.g. task_completion). A known signal that is
not a number raises TypeError; one outside [0, 1] or not finite raises ValueError: a
malformed score is a bug upstream, and silently dropping it would make a failing
trace look healthy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Real
from types import MappingProxyType

from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult

RELIABILITY = "agent_reliability"
CONSISTENCY = "agent_consistency"

CONFIDENCE = "confidence"
SIGNALS = (CONFIDENCE, "loop_detection", "tool_correctness", "coherence")
DEFAULT_SIGNAL_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {CONFIDENCE: 1.0, "loop_detection": 1.0, "tool_correctness": 0.8, "coherence": 1.0}
)
# Names of the per-signal risks in `per_trace_signals`, as docs/metrics.md lists them.
RISK_NAMES: Mapping[str, str] = MappingProxyType(
    {
        CONFIDENCE: "confidence_risk",
        "loop_detection": "loop_risk",
        "tool_correctness": "tool_risk",
        "coherence": "coherence_risk",
    }
)

TOP_K_PERCENTILE = 0.15
ENSEMBLE_WEIGHT = 0.1  # share of the single worst trace in the raw session risk
FLAG_RISK = 0.5  # traces whose risk is strictly above this are flagged

# Metadata figures keep 4 decimals, as docs/metrics.md says ("raw_risk": 0.3200). Only metadata
# is rounded; scores keep full precision.
METADATA_DECIMALS = 4

NOTHING_TO_EVALUATE = "No traces or signals to evaluate."
NO_EVALUABLE_TRACES = "No evaluable traces."

Signals = Mapping[str, Mapping[str, float]]


def resolve_weights(weights: Mapping[str, float] | None) -> dict[str, float]:
    """The default signal weights with `weights` laid over them.

    Raises ValueError for an unknown signal name (a typo would otherwise be ignored
    silently) and for a weight that is negative or not finite.
    """
    resolved = dict(DEFAULT_SIGNAL_WEIGHTS)
    for name, weight in (weights or {}).items():
        if name not in resolved:
            raise ValueError(f"unknown signal weight {name!r}; known signals: {', '.join(SIGNALS)}")
        if not _is_number(weight):
            raise ValueError(f"weight of {name!r} must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weight of {name!r} must be finite and non-negative, got {weight!r}")
        resolved[name] = float(weight)
    return resolved


def top_k(num_traces: int) -> int:
    """How many of the riskiest traces the reliability mean takes: max(1, ceil(n × 0.15))."""
    # Rounding first keeps a product like n × 0.15 = 3.0000000000000004 from giving 4.
    return max(1, math.ceil(round(num_traces * TOP_K_PERCENTILE, 9)))


def known_signals(trace_id: str, scores: Mapping[str, float]) -> dict[str, float]:
    """The trace's validated scores of the four known signals, in `SIGNALS` order."""
    if not isinstance(scores, Mapping):
        raise TypeError(f"signals of trace {trace_id!r} must be a mapping of signal name to score")
    found = {}
    for name in SIGNALS:
        if name not in scores:
            continue
        value = scores[name]
        if not _is_number(value):
            raise TypeError(f"signal {name!r} of trace {trace_id!r} must be a number, got {value!r}")
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"signal {name!r} of trace {trace_id!r} must be within [0, 1], got {value!r}")
        found[name] = float(value)
    return found


def _is_number(value: object) -> bool:
    """A real number that is not a bool (checked against the ABC only for unusual types: that check is slow)."""
    if isinstance(value, float):  # numpy's float64 too
        return True
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, Real)


def _round(value: float) -> float:
    return round(value, METADATA_DECIMALS)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _has_no_signals(signals: Signals) -> bool:
    """The definition's "no traces or no signals" (docs/metrics.md): no trace carries any score.

    A session whose traces carry only other metrics' scores did have signals, just none
    these metrics read, so it is reported as having no evaluable traces instead.
    """
    return not any(signals.values())


def _unevaluated(name: str, explanation: str, total: int, weights: dict[str, float], threshold: float) -> MetricResult:
    return MetricResult(
        name=name,
        score=1.0,
        threshold=threshold,
        explanation=explanation,
        metadata={"total_traces_in_session": total, "traces_evaluated": 0, "signal_weights": weights},
    )


def agent_reliability(
    signals: Signals,
    *,
    weights: Mapping[str, float] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Worst-case failure risk across a session, as a score in [0, 1] (1 = no risk).

    per_trace_risk = max(w × (1 - score)) over the trace's present signals; traces with
    none of the four signals are not evaluated. With the risks sorted descending and
    k = max(1, ceil(n × 0.15)): raw = 0.9 × mean(top k) + 0.1 × max, score = 1 - raw.
    """
    resolved = resolve_weights(weights)
    validated = {trace_id: known_signals(trace_id, scores) for trace_id, scores in signals.items()}
    if _has_no_signals(signals):
        return _unevaluated(RELIABILITY, NOTHING_TO_EVALUATE, len(signals), resolved, threshold)

    per_trace: dict[str, dict[str, float]] = {}
    step_risks: dict[str, float] = {}
    for trace_id, present in validated.items():
        if not present:
            continue
        risks = {name: 1.0 - score for name, score in present.items()}
        step_risks[trace_id] = max(resolved[name] * risk for name, risk in risks.items())
        # The per-signal risks are reported unweighted; `step_risk` is the weighted max.
        per_trace[trace_id] = {RISK_NAMES[name]: _round(risk) for name, risk in risks.items()}
        per_trace[trace_id]["step_risk"] = _round(step_risks[trace_id])
    if not step_risks:
        return _unevaluated(RELIABILITY, NO_EVALUABLE_TRACES, len(signals), resolved, threshold)

    ranked = sorted(step_risks.values(), reverse=True)
    k = top_k(len(ranked))
    mean_top_k = sum(ranked[:k]) / k
    max_risk = ranked[0]
    raw = (1.0 - ENSEMBLE_WEIGHT) * mean_top_k + ENSEMBLE_WEIGHT * max_risk
    flagged = [trace_id for trace_id, risk in step_risks.items() if risk > FLAG_RISK]

    skipped = len(signals) - len(step_risks)
    return MetricResult(
        name=RELIABILITY,
        score=_clamp(1.0 - raw),
        threshold=threshold,
        explanation=(
            f"Session risk {raw:.2f} over {len(step_risks)} trace(s)"
            + (f" ({skipped} without signals skipped)" if skipped else "")
            + f": top-{k} mean risk {mean_top_k:.2f}, worst {max_risk:.2f}; "
            f"{len(flagged)} trace(s) flagged with risk above {FLAG_RISK}."
        ),
        metadata={
            "total_traces_in_session": len(signals),
            "traces_evaluated": len(step_risks),
            "raw_risk": _round(raw),
            "signal_weights": resolved,
            "per_trace_signals": per_trace,
            "flagged_traces": flagged,
            "aggregation": {
                "method": "max_compose_top_k",
                "top_k_percentile": TOP_K_PERCENTILE,
                "ensemble_weight": ENSEMBLE_WEIGHT,
                "mean_top_k_risk": _round(mean_top_k),
                "max_risk": _round(max_risk),
            },
        },
    )


def agent_consistency(
    signals: Signals,
    *,
    weights: Mapping[str, float] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Overall stability across a session, as a score in [0, 1] (1 = smooth).

    Only traces with a confidence signal count. Per trace:
    penalty = Σ w × (1 - score) over its present loop_detection, tool_correctness and
    coherence; weighted_uncertainty = (1 + penalty) × w_conf × (1 - confidence).
    score = 1 - sqrt(mean(weighted_uncertainty²)).
    """
    resolved = resolve_weights(weights)
    validated = {trace_id: known_signals(trace_id, scores) for trace_id, scores in signals.items()}
    if _has_no_signals(signals):
        return _unevaluated(CONSISTENCY, NOTHING_TO_EVALUATE, len(signals), resolved, threshold)

    per_trace: dict[str, dict[str, float]] = {}
    uncertainties: list[float] = []
    for trace_id, present in validated.items():
        if CONFIDENCE not in present:
            continue
        risks = {name: 1.0 - score for name, score in present.items()}
        # The metric's original description prints a penalty of 0.134 for risks 0.05/0.08/0.03,
        # but its formula gives 0.05 + 0.8 × 0.08 + 0.03 = 0.144; the formula is implemented
        # (the example in docs/metrics.md).
        penalty = sum(resolved[name] * risk for name, risk in risks.items() if name != CONFIDENCE)
        uncertainty = (1.0 + penalty) * (resolved[CONFIDENCE] * risks[CONFIDENCE])
        uncertainties.append(uncertainty)
        per_trace[trace_id] = {RISK_NAMES[name]: _round(risk) for name, risk in risks.items()}
        per_trace[trace_id]["situational_penalty"] = _round(penalty)
        per_trace[trace_id]["weighted_uncertainty"] = _round(uncertainty)
    if not uncertainties:
        return _unevaluated(CONSISTENCY, NO_EVALUABLE_TRACES, len(signals), resolved, threshold)

    rms = math.sqrt(sum(u * u for u in uncertainties) / len(uncertainties))
    skipped = len(signals) - len(uncertainties)
    return MetricResult(
        name=CONSISTENCY,
        score=_clamp(1.0 - rms),
        threshold=threshold,
        explanation=(
            f"Session instability {rms:.2f}: root mean square of the weighted uncertainty of "
            f"{len(uncertainties)} trace(s)"
            + (f" ({skipped} without a confidence signal skipped)" if skipped else "")
            + "."
        ),
        metadata={
            "total_traces_in_session": len(signals),
            "traces_evaluated": len(uncertainties),
            "raw_instability": _round(rms),
            "signal_weights": resolved,
            "per_trace_signals": per_trace,
            "aggregation": {"method": "weighted_rms", "rms_value": _round(rms)},
        },
    )


__all__ = [
    "CONSISTENCY",
    "DEFAULT_SIGNAL_WEIGHTS",
    "ENSEMBLE_WEIGHT",
    "FLAG_RISK",
    "NO_EVALUABLE_TRACES",
    "NOTHING_TO_EVALUATE",
    "RELIABILITY",
    "RISK_NAMES",
    "SIGNALS",
    "TOP_K_PERCENTILE",
    "agent_consistency",
    "agent_reliability",
    "known_signals",
    "resolve_weights",
    "top_k",
]
