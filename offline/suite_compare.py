"""`spanscore compare`: did a change make the agent worse? A regression gate for CI.

Takes two suite summaries (`spanscore report --json`) or scored files, and compares the
task success rate (TSR): baseline and candidate with their intervals, the drop, and the
posterior probability that the candidate's true TSR is lower than the baseline's — both
rates drawn by the Bayesian recipe of docs/eval-suites.md (p ~ Beta(1 + c, 1 + n - c),
5000 samples), from one generator seeded 42, baseline first, so the same counts always give
the same probability. Cases that succeeded less often than before are listed. The gate
fails (exit 1) when the TSR drop exceeds `max_tsr_drop` (5 points by default; the
regression gate in docs/eval-suites.md).

Shadow mode: with `by` (a span or resource attribute such as `service.version`), one
scored file (or a `report --by` summary) holds both sides, told apart by that attribute's
value. Without ground truth the outcome is another metric's pass label (`outcome`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanscore.offline.suite_attempts import DEFAULT_OUTCOME, read_scored
from spanscore.offline.suite_report import counted_rate, summarize_groups

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


def load_summary(path: Path, outcome: str = DEFAULT_OUTCOME, by: str | None = None) -> dict[str, Any]:
    """A `report --json` summary, or one computed from a scored file; ValueError when neither.

    With `by`, the summary is grouped by that attribute (`{"by": ..., "groups": ...}`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        text = None  # a gzip-compressed scored file
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        data = None
    if isinstance(data, dict) and ("groups" in data or ("tsr" in data and "cases" in data)):
        return _checked(path, data, outcome, by)
    run = read_scored([path], outcome, by)
    if run.problems:
        raise ValueError(f"{path}: " + "; ".join(run.problems[:3]))
    try:
        return summarize_groups(run)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _checked(path: Path, data: dict[str, Any], outcome: str, by: str | None) -> dict[str, Any]:
    if by is not None and data.get("by") != by:
        raise ValueError(f"{path}: a summary not grouped by {by}; write it with spanscore report --by {by} --json")
    if by is None and "groups" in data:
        raise ValueError(
            f"{path}: a summary grouped by {data.get('by')}; "
            f"compare its groups with --by {data.get('by')} --baseline V1 --candidate V2"
        )
    if data.get("outcome", DEFAULT_OUTCOME) != outcome:
        raise ValueError(f"{path}: a summary of {data.get('outcome')!r}, not of {outcome!r}")
    for part in data["groups"].values() if "groups" in data else [data]:
        if not isinstance(part, dict) or not {"attempts", "successes", "tsr", "cases"} <= part.keys():
            raise ValueError(f"{path}: a summary without attempt counts; write it again with spanscore report --json")
    return data


def group(summary: dict[str, Any], value: str, where: str) -> dict[str, Any]:
    """One group of a grouped summary; ValueError naming the groups there are."""
    groups = summary["groups"]
    if value not in groups:
        raise ValueError(
            f"{where}: no attempts with {summary['by']} = {value!r}; found {', '.join(map(repr, groups)) or 'none'}"
        )
    return groups[value]


def compare(baseline: dict[str, Any], candidate: dict[str, Any]) -> Comparison:
    rng = np.random.default_rng(SEED)
    before = rng.beta(1 + baseline["successes"], 1 + baseline["attempts"] - baseline["successes"], size=SAMPLES)
    after = rng.beta(1 + candidate["successes"], 1 + candidate["attempts"] - candidate["successes"], size=SAMPLES)
    rates = {c["case_id"]: c["successes"] / c["attempts"] for c in baseline["cases"]}
    regressed = [
        (c["case_id"], rates[c["case_id"]], c["successes"] / c["attempts"])
        for c in candidate["cases"]
        if c["case_id"] in rates and c["successes"] / c["attempts"] < rates[c["case_id"]]
    ]
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        drop=baseline["tsr"]["estimate"] - candidate["tsr"]["estimate"],
        p_worse=float(np.mean(after < before)),
        regressed=sorted(regressed, key=lambda r: r[2] - r[1]),
    )


def text(comparison: Comparison, max_drop: float, sides: tuple[str, str] = ("baseline", "candidate")) -> str:
    """The comparison as lines; `sides` names the two (shadow mode: the attribute's values)."""

    def tsr(summary: dict[str, Any]) -> str:
        return counted_rate(summary["successes"], summary["attempts"], summary["tsr"])

    verdict = "FAIL" if comparison.exceeds(max_drop) else "ok"
    width = max(map(len, sides))
    lines = [
        f"{sides[0]:<{width}} TSR {tsr(comparison.baseline)}",
        f"{sides[1]:<{width}} TSR {tsr(comparison.candidate)}",
        f"drop {comparison.drop * 100:+.1f} points (allowed {max_drop * 100:.1f}); "
        f"P(candidate worse) {comparison.p_worse:.3f}: {verdict}",
    ]
    for case, before, after in comparison.regressed:
        lines.append(f"  regressed: {case} {before:.2f} -> {after:.2f}")
    return "\n".join(lines)
