"""A suite's results from scored files: attempts per case, TSR and SSR, pass@k, similarity.

Reads scored OTLP/JSON (what `spanscore score` or a live `file` exporter writes with the
`ground_truth` processor on). An attempt is a span that carries `eval.case.id` and a
`success` result: a session's `evaluate_session` carrier, or the root span of a one-trace
attempt. Its traces (the carrier's links, or the trace itself) give its tool calls:

- TSR: successful attempts / attempts, interval by the Bayesian recipe of SUITES.md;
- SSR: steps are tool calls; a step is correct when it did not fail and, where the case
  lists expected calls (`--dataset`), is one of them; correct steps / steps over all
  attempts with steps, the same interval on the pooled counts;
- per case: attempts, successes, pass@k and pass^k for each requested k up to the
  attempts (the unbiased estimator, with the interval on p), and the mean pairwise
  trajectory similarity of its attempts (multiset Jaccard over tool names).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanscore.collector.assembler import Assembler, AssemblerConfig
from spanscore.collector.otlp_files import read_requests
from spanscore.core.attributes import any_value_to_python
from spanscore.processors.agent_trace import agent_trace_of
from spanscore.processors.ground_truth.dataset import Dataset
from spanscore.processors.metrics.intervals import pass_at_k_interval, pass_pow_k_interval, success_rate_interval
from spanscore.processors.metrics.pass_at_k import pass_at_k_unbiased, pass_pow_k_unbiased
from spanscore.processors.metrics.reliability import mean_pairwise_similarity

DEFAULT_K = (1, 3, 5)


@dataclass
class AttemptRecord:
    case_id: str
    success: bool
    steps: list[tuple[str, bool]] = field(default_factory=list)  # (tool name, did not fail)


@dataclass
class SuiteReport:
    attempts: list[AttemptRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_attempts(paths: Sequence[Path]) -> SuiteReport:
    report = SuiteReport()
    assembler = Assembler(AssemblerConfig(forwarded_trace_memory=0))
    for path in paths:
        for _, request in read_requests(path, report.problems):
            assembler.add(request, 0.0)
    traces = {trace.trace_id: trace for trace in assembler.pop_all()}
    for trace in traces.values():
        anchor = trace.anchor
        if anchor is None:
            continue
        attributes = {kv.key: any_value_to_python(kv.value) for kv in anchor.attributes}
        case_id, success = attributes.get("eval.case.id"), attributes.get("eval.success.score")
        if case_id is None or success is None:
            continue
        linked = [traces[link.trace_id] for link in anchor.links if link.trace_id in traces] or [trace]
        steps = [(step.name, step.error is None) for t in linked for step in agent_trace_of(t).tool_steps]
        report.attempts.append(AttemptRecord(str(case_id), success == 1.0, steps))
    return report


def summarize(report: SuiteReport, ks: Sequence[int] = DEFAULT_K, dataset: Dataset | None = None) -> dict[str, Any]:
    if not report.attempts:
        raise ValueError("no graded attempts found: score the files with the ground_truth processor first")
    successes = sum(a.success for a in report.attempts)
    summary: dict[str, Any] = {"attempts": len(report.attempts), "successes": successes,
                               "tsr": _rate(successes, len(report.attempts)), "ssr": None, "cases": []}
    correct = total = 0
    for attempt in report.attempts:
        expected = _expected_tools(dataset, attempt.case_id)
        for name, ok in attempt.steps:
            total += 1
            correct += ok and (expected is None or name in expected)
    if total:
        summary["ssr"] = _rate(correct, total)
    by_case: dict[str, list[AttemptRecord]] = defaultdict(list)
    for attempt in report.attempts:
        by_case[attempt.case_id].append(attempt)
    for case_id, attempts in sorted(by_case.items()):
        n, c = len(attempts), sum(a.success for a in attempts)
        summary["cases"].append({
            "case_id": case_id, "attempts": n, "successes": c,
            "pass_at_k": {str(k): _with_interval(pass_at_k_unbiased(n, c, k), pass_at_k_interval(n, c, k))
                          for k in ks if k <= n},
            "pass_pow_k": {str(k): _with_interval(pass_pow_k_unbiased(n, c, k), pass_pow_k_interval(n, c, k))
                           for k in ks if k <= n},
            "trajectory_similarity": mean_pairwise_similarity([[name for name, _ in a.steps] for a in attempts]),
        })
    return summary


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
    """The summary as a few readable lines."""
    lines = [f"TSR {_show(summary['tsr'])}", f"SSR {_show(summary['ssr']) if summary['ssr'] else '- (no steps)'}"]
    for case in summary["cases"]:
        rates = "  ".join(f"pass@{k} {_show(v)}" for k, v in case["pass_at_k"].items())
        similarity = case["trajectory_similarity"]
        lines.append(f"{case['case_id']}: {case['successes']}/{case['attempts']} succeeded  {rates}"
                     + (f"  similarity {similarity:.2f}" if similarity is not None else ""))
    return "\n".join(lines)


def _show(rate: dict[str, float]) -> str:
    return f"{rate['estimate']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}]"
