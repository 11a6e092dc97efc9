"""`spanscore compare`: did a change make the agent worse? A regression gate for CI.

Takes two suite summaries (`spanscore report --json`) or scored files, and compares the
task success rate (TSR): baseline and candidate with their intervals, the drop, and the
posterior probability that the candidate's true TSR is lower than the baseline's — both
rates drawn by the Bayesian recipe of SUITES.md (p ~ Beta(1 + c, 1 + n - c), 5000
samples), from one generator seeded 42, baseline first, so the same counts always give
the same probability. Cases that succeeded less often than before are listed. The gate
fails (exit 1) when the TSR drop exceeds `max_tsr_drop` (the reliability note's 5 points).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanscore.collector.suite_report import read_attempts, summarize

DEFAULT_MAX_TSR_DROP = 0.05
SAMPLES = 5000
SEED = 42


@dataclass(frozen=True)
class Comparison:
    baseline: dict[str, Any]
    candidate: dict[str, Any]
    drop: float  # baseline TSR - candidate TSR
    p_worse: float  # posterior probability that the candidate's TSR is lower
    regressed: list[tuple[str, float, float]]  # (case, baseline rate, candidate rate)

    def exceeds(self, max_drop: float) -> bool:
        return self.drop > max_drop


def load_summary(path: Path) -> dict[str, Any]:
    """A `report --json` summary, or one computed from a scored file; ValueError when neither."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and "tsr" in data and "cases" in data:
        if "attempts" not in data or "successes" not in data:
            raise ValueError(f"{path}: a summary without attempt counts; write it again with spanscore report --json")
        return data
    attempts = read_attempts([path])
    if attempts.problems:
        raise ValueError(f"{path}: " + "; ".join(attempts.problems[:3]))
    try:
        return summarize(attempts)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def compare(baseline: dict[str, Any], candidate: dict[str, Any]) -> Comparison:
    rng = np.random.default_rng(SEED)
    before = rng.beta(1 + baseline["successes"], 1 + baseline["attempts"] - baseline["successes"], size=SAMPLES)
    after = rng.beta(1 + candidate["successes"], 1 + candidate["attempts"] - candidate["successes"], size=SAMPLES)
    rates = {c["case_id"]: c["successes"] / c["attempts"] for c in baseline["cases"]}
    regressed = [(c["case_id"], rates[c["case_id"]], c["successes"] / c["attempts"])
                 for c in candidate["cases"] if c["case_id"] in rates and c["successes"] / c["attempts"] < rates[c["case_id"]]]
    return Comparison(
        baseline=baseline, candidate=candidate,
        drop=baseline["tsr"]["estimate"] - candidate["tsr"]["estimate"],
        p_worse=float(np.mean(after < before)),
        regressed=sorted(regressed, key=lambda r: r[2] - r[1]),
    )


def text(comparison: Comparison, max_drop: float) -> str:
    def tsr(summary: dict[str, Any]) -> str:
        rate = summary["tsr"]
        return (f"{rate['estimate']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}] "
                f"({summary['successes']}/{summary['attempts']})")

    verdict = "FAIL" if comparison.exceeds(max_drop) else "ok"
    lines = [
        f"baseline  TSR {tsr(comparison.baseline)}",
        f"candidate TSR {tsr(comparison.candidate)}",
        f"drop {comparison.drop * 100:+.1f} points (allowed {max_drop * 100:.1f}); "
        f"P(candidate worse) {comparison.p_worse:.3f}: {verdict}",
    ]
    for case, before, after in comparison.regressed:
        lines.append(f"  regressed: {case} {before:.2f} -> {after:.2f}")
    return "\n".join(lines)
