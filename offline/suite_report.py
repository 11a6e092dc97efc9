"""A suite's summary from its scored attempts: TSR and SSR, pass@k per case, similarity.

Over the attempts of `suite_attempts` (one group of them with `--by`):

- TSR: successful attempts / attempts, interval by the Bayesian recipe of docs/eval-suites.md;
- SSR: steps are tool calls; a step is correct when it did not fail and, where the case
  lists expected calls (`--dataset`), is one of them; the mean over attempts with steps
  of correct steps / steps, with `mean_rate_interval` (the recipe with each attempt one
  try that succeeded by its step rate); beside it the per-step error
  (1 - SSR) and the mean steps per attempt, the two inputs of the error budget;
- per case: attempts, successes, pass@k and pass^k for each requested k up to the
  attempts (the unbiased estimator, with the interval on p), the mean `progress_auc`,
  the mean pairwise trajectory similarity (multiset Jaccard over tool names), and the
  failed attempts with their failed or errored results;
- the suite's pass@k and pass^k: the mean over cases of each case's, for k up to the
  fewest attempts of any case (at most 20), with `mean_rate_interval` over the cases'
  estimates.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from spanscore.offline.suite_attempts import Attempt, ScoredRun
from spanscore.processors.ground_truth.dataset import Dataset
from spanscore.processors.metrics.intervals import (
    mean_rate_interval,
    pass_at_k_interval,
    pass_pow_k_interval,
    success_rate_interval,
)
from spanscore.processors.metrics.pass_at_k import pass_at_k_unbiased, pass_pow_k_unbiased
from spanscore.processors.metrics.reliability import mean_pairwise_similarity, step_success_rate

DEFAULT_K = (1, 3, 5)
MAX_CURVE_K = 20
UNGRADED_REASONS_SHOWN = 3  # distinct reasons the text and the page name; the JSON has every attempt


def summarize_groups(run: ScoredRun, ks: Sequence[int] = DEFAULT_K, dataset: Dataset | None = None) -> dict[str, Any]:
    """`{"by": key, "groups": {value: summary}}` for a run read with `by`; else one summary."""
    if run.by is None:
        return summarize(run, ks, dataset)
    if not run.attempts:
        raise ValueError(_nothing_graded(run))
    return {
        "by": run.by,
        "outcome": run.outcome,
        "groups": {
            group: summarize(run.only(group), ks, dataset)
            for group in run.groups()
            if any(a.group == group for a in run.attempts)
        },
    }


def summarize(run: ScoredRun, ks: Sequence[int] = DEFAULT_K, dataset: Dataset | None = None) -> dict[str, Any]:
    if not run.attempts:
        raise ValueError(_nothing_graded(run))
    attempts = run.attempts
    successes = sum(a.success for a in attempts)
    summary: dict[str, Any] = {
        "outcome": run.outcome,
        "attempts": len(attempts),
        "successes": successes,
        "ungraded": len(run.ungraded),
        "tsr": _rate(successes, len(attempts)),
        "ssr": None,
        "steps": None,
        "suite": {},
        "cases": [],
        # Left out of the rates: which attempts, and why (an error, or skipped past the judge's budget).
        "ungraded_attempts": [{"case_id": u.case_id, "trace_id": u.trace_id, "reason": u.error} for u in run.ungraded],
    }
    episodes = [
        [ok and (expected is None or name in expected) for name, ok in a.steps]
        for a in attempts
        if a.steps
        for expected in [_expected_tools(dataset, a.case_id)]
    ]
    if episodes:
        ssr = step_success_rate(episodes)
        interval = mean_rate_interval([sum(e) / len(e) for e in episodes])
        summary["ssr"] = {"estimate": ssr, "low": interval.low, "high": interval.high}
        summary["steps"] = {
            "attempts_with_steps": len(episodes),
            "mean_steps": sum(map(len, episodes)) / len(episodes),
            "step_error": 1 - ssr,
        }
    by_case: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        by_case[attempt.case_id].append(attempt)
    counts = [(len(a), sum(x.success for x in a)) for _, a in sorted(by_case.items())]
    fewest = min(MAX_CURVE_K, *(n for n, _ in counts))
    summary["suite"] = {
        "pass_at_k": {
            str(k): _suite_rate([pass_at_k_unbiased(n, c, k) for n, c in counts]) for k in range(1, fewest + 1)
        },
        "pass_pow_k": {
            str(k): _suite_rate([pass_pow_k_unbiased(n, c, k) for n, c in counts]) for k in range(1, fewest + 1)
        },
    }
    for case_id, case_attempts in sorted(by_case.items()):
        n, c = len(case_attempts), sum(a.success for a in case_attempts)
        aucs = [a.progress_auc for a in case_attempts if a.progress_auc is not None]
        summary["cases"].append(
            {
                "case_id": case_id,
                "attempts": n,
                "successes": c,
                "pass_at_k": {
                    str(k): _with_interval(pass_at_k_unbiased(n, c, k), pass_at_k_interval(n, c, k))
                    for k in ks
                    if k <= n
                },
                "pass_pow_k": {
                    str(k): _with_interval(pass_pow_k_unbiased(n, c, k), pass_pow_k_interval(n, c, k))
                    for k in ks
                    if k <= n
                },
                "progress_auc": sum(aucs) / len(aucs) if aucs else None,
                "trajectory_similarity": mean_pairwise_similarity(
                    [[name for name, _ in a.steps] for a in case_attempts]
                ),
                "failures": [
                    {
                        "trace_id": a.trace_id,
                        "findings": [
                            {"metric": f.metric, "where": f.where, "score": f.score, "text": f.text} for f in a.findings
                        ],
                    }
                    for a in case_attempts
                    if not a.success
                ],
            }
        )
    return summary


def _nothing_graded(run: ScoredRun) -> str:
    if run.ungraded:
        return (
            f"no graded attempts found: all {len(run.ungraded)} carry eval.{run.outcome}.error or .skipped "
            f"(first: {run.ungraded[0].error})"
        )
    if run.outcome == "success":
        return "no graded attempts found: score the files with the ground_truth processor first"
    return f"no graded attempts found: no span carries eval.{run.outcome}.score"


def _suite_rate(rates: list[float]) -> dict[str, float]:
    return _with_interval(sum(rates) / len(rates), mean_rate_interval(rates))


def _expected_tools(dataset: Dataset | None, case_id: str) -> set[str] | None:
    case = dataset.by_id(case_id) if dataset is not None else None
    if case is None or not case.expected_tool_calls:
        return None
    return {call.tool for call in case.expected_tool_calls}


def _rate(successes: int, total: int) -> dict[str, float]:
    return _with_interval(successes / total, success_rate_interval(successes, total))


def _with_interval(estimate: float, interval) -> dict[str, float]:
    return {"estimate": estimate, "low": float(interval.low), "high": float(interval.high)}


def text(summary: dict[str, Any]) -> str:
    """The summary (or each group's) as a few readable lines."""
    if "groups" in summary:
        return "\n\n".join(f"{summary['by']} = {group}\n{text(part)}" for group, part in summary["groups"].items())
    lines = [
        f"TSR {_show(summary['tsr'])} ({summary['successes']}/{summary['attempts']} {summary['outcome']})"
        + (f", {summary['ungraded']} ungraded" if summary["ungraded"] else ""),
        f"SSR {_show(summary['ssr']) if summary['ssr'] else '- (no steps)'}",
    ]
    for reason, count in ungraded_reasons(summary)[:UNGRADED_REASONS_SHOWN]:
        lines.append(f"ungraded x{count}: {reason}")
    for case in summary["cases"]:
        rates = "  ".join(f"pass@{k} {_show(v)}" for k, v in case["pass_at_k"].items())
        similarity = case["trajectory_similarity"]
        lines.append(
            f"{case['case_id']}: {case['successes']}/{case['attempts']} succeeded  {rates}"
            + (f"  similarity {similarity:.2f}" if similarity is not None else "")
        )
    return "\n".join(lines)


def ungraded_reasons(summary: dict[str, Any]) -> list[tuple[str, int]]:
    """Why attempts were left ungraded, most frequent first."""
    return Counter(u["reason"] for u in summary.get("ungraded_attempts", [])).most_common()


def _show(rate: dict[str, float]) -> str:
    return f"{rate['estimate']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}]"
