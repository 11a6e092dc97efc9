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
  failed attempts with their failed or errored results and the spans failure_localization
  blamed;
- the failure categories of the failed attempts, per case and for the suite: how many
  failed attempts each category was found in (once per attempt), from failure_localization's
  results on their traces; empty when it did not run on them;
- the suite's pass@k and pass^k: the mean over cases of each case's, for k up to the
  fewest attempts of any case (at most 20), with `mean_rate_interval` over the cases'
  estimates.

`report_summary` adds each trace's span-level metrics (`offline.span_level`), and gives
them alone for scored files that hold span-level results but no graded attempt.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.core.wording import counted
from spanscore.offline import span_level
from spanscore.offline.blamed_spans import group_of, group_words
from spanscore.offline.suite_attempts import Attempt, ScoredRun
from spanscore.processors.eval_dataset import Dataset
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
FAILURE_REASONS_SHOWN = 5
CATEGORIES_SHOWN = 8  # failure categories the text names; the JSON and the page have all
CASES_NAMED = 3  # per category in the text
REASON_CHARS = 160
# What SSR counts as a correct step, with and without the dataset's expected calls.
CORRECT_STEP_EXPECTED = "it did not fail and, where the case lists expected tools, is one of them"
CORRECT_STEP_ANY = "it did not fail (--dataset also requires it to be an expected tool)"


def report_summary(run: ScoredRun, ks: Sequence[int] = DEFAULT_K, dataset: Dataset | None = None) -> dict[str, Any]:
    """What `report` prints and writes: the suite's summary (`summarize_groups`) with each
    trace's span-level metrics under `span_metrics`. Without a graded attempt but with
    span-level results, those alone, `not_graded` saying why; without either, ValueError."""
    traces = span_level.summary(run.span_metrics)
    try:
        summary = summarize_groups(run, ks, dataset)
    except ValueError as exc:
        if not traces:
            raise
        return {"outcome": run.outcome, "not_graded": str(exc), "span_metrics": traces}
    summary["span_metrics"] = traces
    return summary


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
        "failure_categories": failure_categories(attempts),
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
            "correct_when": CORRECT_STEP_EXPECTED if dataset is not None else CORRECT_STEP_ANY,
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
    # The unbiased estimator needs k attempts or more: say which cases have fewer.
    short = {str(k): {case_id: n for case_id, (n, _) in zip(sorted(by_case), counts) if n < k} for k in ks}
    summary["k_beyond_attempts"] = {k: cases for k, cases in short.items() if cases}
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
                "failure_categories": failure_categories(case_attempts),
                "failures": [
                    {
                        "trace_id": a.trace_id,
                        "findings": [
                            {"metric": f.metric, "where": f.where, "score": f.score, "text": f.text} for f in a.findings
                        ],
                        "localized": a.localized,
                        "categories": a.categories,
                        "blamed": [b.as_json() for b in a.blamed],
                    }
                    for a in case_attempts
                    if not a.success
                ],
            }
        )
    return summary


def failure_categories(attempts: Sequence[Attempt]) -> list[dict[str, Any]]:
    """Each failure category of the failed attempts: in how many (`attempts`, once per
    attempt) and on how many blamed spans, with those attempts per case; most frequent first."""
    found: dict[str, dict[str, Any]] = {}
    for attempt in attempts:
        if attempt.success:
            continue
        groups = {b.category: b.group for b in attempt.blamed}
        for category in attempt.categories:
            entry = found.setdefault(
                category,
                {
                    "category": category,
                    "group": groups.get(category) or group_of(category),
                    "attempts": 0,
                    "blamed_spans": 0,
                    "cases": {},
                },
            )
            entry["attempts"] += 1
            entry["cases"][attempt.case_id] = entry["cases"].get(attempt.case_id, 0) + 1
        for blame in attempt.blamed:
            found[blame.category]["blamed_spans"] += 1
    return sorted(found.values(), key=lambda e: (-e["attempts"], -e["blamed_spans"], e["category"]))


def _nothing_graded(run: ScoredRun) -> str:
    if run.ungraded:
        which = "the 1 attempt carries" if len(run.ungraded) == 1 else f"all {len(run.ungraded)} attempts carry"
        return (
            f"no graded attempts found: {which} eval.{run.outcome}.error or .skipped (first: {run.ungraded[0].error})"
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
    """The summary (or each group's) as a few readable lines, then the span-level metrics
    of a `report_summary`."""
    span_lines = span_level.text_lines(summary.get("span_metrics", []))
    if "not_graded" in summary:
        return "\n".join([f"no suite rates: {summary['not_graded']}", *span_lines])
    if "groups" in summary:
        parts = [f"{summary['by']} = {group}\n{_suite_text(part)}" for group, part in summary["groups"].items()]
        return "\n\n".join(parts + (["\n".join(span_lines)] if span_lines else []))
    return "\n".join([_suite_text(summary), *span_lines])


def _suite_text(summary: dict[str, Any]) -> str:
    outcome = "" if summary["outcome"] == "success" else f" (outcome: {summary['outcome']})"
    lines = [
        f"TSR {counted_rate(summary['successes'], summary['attempts'], summary['tsr'])}{outcome}"
        + (f", {counted(summary['ungraded'], 'attempt')} ungraded" if summary["ungraded"] else ""),
        f"SSR {_show_ssr(summary)}",
    ]
    for reason, count in ungraded_reasons(summary)[:UNGRADED_REASONS_SHOWN]:
        lines.append(f"ungraded x{count}: {reason}")
    for case in summary["cases"]:
        rates = "  ".join(f"pass@{k} {v['estimate']:.3f} ({credible(v)})" for k, v in case["pass_at_k"].items())
        similarity = case["trajectory_similarity"]
        lines.append(
            f"{case['case_id']}: {case['successes']}/{case['attempts']} succeeded  {rates}"
            + (f"  similarity {similarity:.2f}" if similarity is not None else "")
        )
    # One line per set of cases short of attempts: "pass@3, pass@5 not estimated for ...".
    by_cases: dict[tuple, list[str]] = {}
    for k, short in summary.get("k_beyond_attempts", {}).items():
        by_cases.setdefault(tuple(short.items()), []).append(f"pass@{k}")
    for short, names in by_cases.items():
        cases = ", ".join(f"{case_id} ({n})" for case_id, n in short[:FAILURE_REASONS_SHOWN])
        more = f" and {len(short) - FAILURE_REASONS_SHOWN} more" if len(short) > FAILURE_REASONS_SHOWN else ""
        lines.append(
            f"{', '.join(names)} not estimated for {counted(len(short), 'case')} with fewer attempts: {cases}{more}"
        )
    failed = summary["attempts"] - summary["successes"]
    reasons = failure_reasons(summary)
    if reasons:
        lines.append(f"why attempts failed ({failed} of {summary['attempts']}; most frequent first):")
        for (metric, reason), count in reasons[:FAILURE_REASONS_SHOWN]:
            lines.append(f"  {count}x {metric}: {excerpt(reason, REASON_CHARS)}")
        if len(reasons) > FAILURE_REASONS_SHOWN:
            lines.append(
                f"  ... and {counted(len(reasons) - FAILURE_REASONS_SHOWN, 'other reason')} (see --json or -o)"
            )
    lines += _category_lines(summary)
    lines.append(INTERVAL_LEGEND)
    return "\n".join(lines)


def _category_lines(summary: dict[str, Any]) -> list[str]:
    """Where failure_localization ran on failed attempts: the categories it found in them."""
    failures = [failure for case in summary["cases"] for failure in case["failures"]]
    localized = [failure for failure in failures if failure.get("localized")]
    if not localized:
        return []
    categories = summary.get("failure_categories", [])
    lines = [
        f"failure categories of failed attempts (failure_localization on {len(localized)} of {len(failures)}; "
        "an attempt counts once per category):"
    ]
    for entry in categories[:CATEGORIES_SHOWN]:
        cases = sorted(entry["cases"].items(), key=lambda item: (-item[1], item[0]))
        named = ", ".join(f"{excerpt(case_id, REASON_CHARS)} {n}" for case_id, n in cases[:CASES_NAMED])
        if len(cases) > CASES_NAMED:
            named += f" and {counted(len(cases) - CASES_NAMED, 'other case')}"
        lines.append(
            f"  {excerpt(entry['category'])}: {counted(entry['attempts'], 'attempt')}, "
            f"{group_words(entry['group'])} ({named})"
        )
    if len(categories) > CATEGORIES_SHOWN:
        lines.append(f"  ... and {counted(len(categories) - CATEGORIES_SHOWN, 'other category')} (see --json or -o)")
    none_found = sum(1 for failure in localized if not failure["categories"])
    if none_found:
        lines.append(f"  none found: {counted(none_found, 'attempt')} (no error its spans state)")
    return lines


INTERVAL_LEGEND = (
    "ranges: the true rate's 95% credible interval (Bayesian, uniform prior); "
    "after 0/n or n/n it rightly excludes the observed rate"
)


def counted_rate(successes: float, total: int, rate: dict[str, float]) -> str:
    """`3/8 = 0.375 · true rate 95% credible 0.137–0.694`: the count first, so an observed
    0/n or n/n is not read against an interval that, rightly, excludes it."""
    count, observed, true_range = rate_parts(successes, total, rate)
    return f"{count} = {observed} · true rate 95% credible {true_range}"


def rate_parts(successes: float, total: int, rate: dict[str, float]) -> tuple[str, str, str]:
    """(count, observed rate, range of the true rate): `("0/1", "0.000", "0.013–0.832")`, as the
    printout and the page word a rate. A count that is a sum of rates (SSR's) shows up to two
    decimals: 20/21, 13.33/21."""
    count = f"{successes:.2f}".rstrip("0").rstrip(".")
    return f"{count}/{total}", f"{rate['estimate']:.3f}", credible(rate)


def credible(rate: dict[str, float]) -> str:
    return f"{rate['low']:.3f}–{rate['high']:.3f}"


def _show_ssr(summary: dict[str, Any]) -> str:
    ssr, steps = summary["ssr"], summary["steps"]
    if not ssr:
        return "- (no tool calls)"
    attempts = steps["attempts_with_steps"]
    total = round(steps["mean_steps"] * attempts)
    # The count the interval is drawn from: each attempt one try, succeeding by its step rate.
    return (
        f"{counted_rate(ssr['estimate'] * attempts, attempts, ssr)} (each attempt's correct steps / steps, "
        f"averaged over {counted(attempts, 'attempt')} with {counted(total, 'step')}; "
        f"a step is correct when {steps['correct_when']})"
    )


def failure_reasons(summary: dict[str, Any]) -> list[tuple[tuple[str, str], int]]:
    """Why attempts failed: each failing result (metric, text), most frequent first."""
    return Counter(
        (finding["metric"], finding["text"])
        for case in summary["cases"]
        for failure in case["failures"]
        for finding in failure["findings"]
    ).most_common()


def ungraded_reasons(summary: dict[str, Any]) -> list[tuple[str, int]]:
    """Why attempts were left ungraded, most frequent first."""
    return Counter(u["reason"] for u in summary.get("ungraded_attempts", [])).most_common()
