"""`spanscore report`: graded attempts read back from a scored file, counted per case, with
the estimates and intervals a hand computation gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.scored_suite import attempt, recipe, score_suite

ROOT = Path(__file__).resolve().parents[2]

# (case, the city the agent asked for, another tool it called too)
ATTEMPTS = (
    [("oslo", "Oslo", None)] * 4
    + [("oslo", "Bergen", None)]
    + [("paris", "Paris", "search"), ("paris", "Lyon", None), ("paris", "Nice", None)]
)


@pytest.fixture
def scored(tmp_path) -> tuple[Path, Path]:
    return score_suite(tmp_path, [attempt(*a) for a in ATTEMPTS])


def test_the_summary_holds_the_hand_computed_counts_and_intervals(scored, tmp_path):
    out, dataset = scored
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(out), "--dataset", str(dataset), "--json", str(summary_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_path.read_text())
    # 4 of 5 Oslo attempts asked for the expected city; of the Paris attempts one did but also
    # called `search`, which its case does not expect (tool usage: selection 1/2), the other
    # two asked for another city: 4 of 8.
    assert summary["tsr"] == {"estimate": 4 / 8, "low": recipe(4, 8)[0], "high": recipe(4, 8)[1]}
    # No tool call failed; `search` is not expected by its case: per attempt 1 (five Oslo
    # attempts), 1/2 ([get_weather, search]), 1, 1 -> mean 7.5 / 8.
    assert summary["ssr"]["estimate"] == 7.5 / 8
    oslo, paris = summary["cases"]
    assert (oslo["case_id"], oslo["attempts"], oslo["successes"]) == ("oslo", 5, 4)
    assert oslo["pass_at_k"]["1"]["estimate"] == pytest.approx(4 / 5)
    assert oslo["pass_at_k"]["3"]["estimate"] == 1.0  # 1 - C(1,3)/C(5,3) = 1 - 0/10
    assert oslo["pass_pow_k"]["3"]["estimate"] == pytest.approx(4 / 10)  # C(4,3)/C(5,3)
    assert oslo["pass_pow_k"]["3"]["low"] == recipe(4, 5, lambda p: p**3)[0]
    assert set(paris["pass_at_k"]) == {"1", "3"}  # k = 5 exceeds its 3 attempts
    assert paris["pass_pow_k"]["3"]["estimate"] == 0.0  # C(1,3)/C(3,3)
    assert oslo["trajectory_similarity"] == 1.0
    # [gw, search] vs [gw] twice: 1/2 each; [gw] vs [gw]: 1 -> mean 2/3
    assert paris["trajectory_similarity"] == pytest.approx(2 / 3)
    assert summary["k_beyond_attempts"] == {"5": {"paris": 3}}
    low, high = recipe(4, 8)
    lines = result.stdout.splitlines()
    # The count leads, so an interval that excludes an observed 0/n or n/n reads right.
    assert lines[0] == f"TSR 4/8 = 0.500 · true rate 95% credible {low:.3f}–{high:.3f}"
    low, high = recipe(7.5, 8)
    assert lines[1] == (
        f"SSR 7.5/8 = 0.938 · true rate 95% credible {low:.3f}–{high:.3f} (each attempt's correct steps / "
        "steps, averaged over 8 attempts with 9 steps; a step is correct when it did not fail and, where the "
        "case lists expected tools, is one of them)"
    )
    assert "pass@5 not estimated for 1 case with fewer attempts: paris (3)" in lines
    # 4 failed attempts: 3 missed the expected call, 1 called an unexpected tool beside it.
    reasons = lines.index("why attempts failed (4 of 8; most frequent first):")
    assert lines[reasons + 1 : reasons + 6] == [
        "  3x tool_usage: Tool usage 0.75 (turn 0): selection 1.00, parameters 0.00, sequence 1.00, "
        "utilization 1.00 (values found: -3).",
        "  3x success: Failed: every expected tool call made, every turn's tool usage at tool_threshold",
        "  1x tool_call_accuracy: 0 of 1 expected tool calls made; missed get_weather: get_weather called with "
        "city='Bergen', expected 'Oslo'",
        "  1x tool_usage: Tool usage 0.88 (turn 0): selection 0.50, parameters 1.00, sequence 1.00, "
        "utilization 1.00 (values found: -3).",
        "  1x success: Failed: every turn's tool usage at tool_threshold",
    ]
    assert lines[reasons + 6] == "  ... and 2 other reasons (see --json or -o)"
    assert lines[-2].startswith("ranges: the true rate's 95% credible interval")
    assert lines[-1] == f"wrote {summary_path} (summary JSON)"


def test_files_without_graded_attempts_say_so(tmp_path):
    plain = ROOT / "examples" / "weather-agent.json"
    result = subprocess.run(
        [sys.executable, "-m", "spanscore", "report", str(plain)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "no graded attempts found" in result.stderr


def summary_of(attempts: int, successes: int, cases: dict[str, tuple[int, int]]) -> dict:
    from spanscore.processors.metrics.intervals import success_rate_interval

    interval = success_rate_interval(successes, attempts)
    return {
        "attempts": attempts,
        "successes": successes,
        "tsr": {"estimate": successes / attempts, "low": interval.low, "high": interval.high},
        "ssr": None,
        "cases": [{"case_id": case, "attempts": n, "successes": c} for case, (n, c) in cases.items()],
    }


def compare(tmp_path: Path, baseline: dict | Path, candidate: dict | Path, *extra: str):
    paths = []
    for name, value in (("baseline.json", baseline), ("candidate.json", candidate)):
        if isinstance(value, dict):
            path = tmp_path / name
            path.write_text(json.dumps(value))
            value = path
        paths.append(str(value))
    return subprocess.run(
        [sys.executable, "-m", "spanscore", "compare", *paths, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_ten_point_tsr_drop_fails_the_gate(tmp_path):
    before = summary_of(100, 80, {"oslo": (50, 45), "paris": (50, 35)})
    after = summary_of(100, 70, {"oslo": (50, 45), "paris": (50, 25)})
    result = compare(tmp_path, before, after)
    assert result.returncode == 1, result.stderr
    assert "drop +10.0 points (allowed 5.0)" in result.stdout and "FAIL" in result.stdout
    assert "regressed: paris 0.70 -> 0.50" in result.stdout
    assert "oslo" not in result.stdout.split("FAIL", 1)[1]
    # P(candidate worse), drawn as the recipe says from one generator, baseline first:
    rng = np.random.default_rng(42)
    baseline_p = rng.beta(1 + 80, 1 + 20, size=5000)
    candidate_p = rng.beta(1 + 70, 1 + 30, size=5000)
    worse = np.mean(candidate_p < baseline_p)
    assert f"P(candidate worse) {worse:.3f}" in result.stdout


def test_an_unchanged_rerun_passes_and_a_larger_margin_lets_a_drop_through(tmp_path, scored):
    out, _ = scored
    same = compare(tmp_path, out, out)  # scored files are accepted too
    assert same.returncode == 0, same.stderr
    assert "drop +0.0 points" in same.stdout
    before = summary_of(100, 80, {"oslo": (100, 80)})
    after = summary_of(100, 70, {"oslo": (100, 70)})
    assert compare(tmp_path, before, after, "--max-tsr-drop", "0.15").returncode == 0


def test_bad_input_exits_two(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = compare(tmp_path, bad, bad)
    assert result.returncode == 2
    assert "bad.json" in result.stderr


def report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", "report", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_ssr_suite_curves_and_failures_are_the_hand_computed_ones(scored, tmp_path):
    out, dataset = scored
    summary_path = tmp_path / "summary.json"
    assert report(str(out), "--dataset", str(dataset), "--json", str(summary_path)).returncode == 0
    summary = json.loads(summary_path.read_text())
    # SSR: 8 attempts as 8 tries, their step rates summing to 7.5.
    assert (summary["ssr"]["low"], summary["ssr"]["high"]) == recipe(7.5, 8)
    assert summary["steps"] == {
        "attempts_with_steps": 8,
        "mean_steps": 9 / 8,
        "step_error": 1 - 7.5 / 8,
        "correct_when": "it did not fail and, where the case lists expected tools, is one of them",
    }
    # The suite's curves go up to Paris's 3 attempts: the mean of the two cases' estimates,
    # pass@1 (4/5 + 0/3) / 2 over 2 tries; pass^3 (C(4,3)/C(5,3) + 0) / 2.
    suite = summary["suite"]
    assert set(suite["pass_at_k"]) == {"1", "2", "3"}
    assert suite["pass_at_k"]["1"]["estimate"] == pytest.approx(0.4)
    assert (suite["pass_at_k"]["1"]["low"], suite["pass_at_k"]["1"]["high"]) == pytest.approx(recipe(4 / 5, 2))
    assert suite["pass_pow_k"]["3"]["estimate"] == pytest.approx(0.2)
    oslo, paris = summary["cases"]
    assert oslo["progress_auc"] is None  # the dataset has no subgoals
    assert len(oslo["failures"]) == 1 and len(paris["failures"]) == 3
    extra_tool, lyon = ({f["metric"]: f for f in failure["findings"]} for failure in paris["failures"][:2])
    # [get_weather, search] for {get_weather}: selection 1/2, 0.25 x (0.5 + 1 + 1 + 1).
    assert extra_tool["tool_usage"]["score"] == 0.875
    assert "selection 0.50, parameters 1.00" in extra_tool["tool_usage"]["text"]
    assert extra_tool["success"]["text"] == "Failed: every turn's tool usage at tool_threshold"
    assert "missed get_weather" in lyon["tool_call_accuracy"]["text"]
    assert lyon["success"]["text"] == "Failed: every expected tool call made, every turn's tool usage at tool_threshold"
    assert lyon["success"]["score"] == 0.0


def test_an_outcome_recorded_as_an_error_or_skipped_is_ungraded_not_failed(tmp_path):
    from spanscore.core.otlp_json import encode_request
    from tests.support.spans import new_trace_id, request_of, span

    def graded(case: str, **evals):
        return (
            encode_request(
                request_of([span(new_trace_id(), "invoke_agent", attributes={"eval.case.id": case, **evals})])
            )
            + "\n"
        )

    path = tmp_path / "scored.jsonl"
    over_budget = "not every check was graded: turn 1 answer not graded: judge budget exhausted: ..."
    path.write_text(
        graded("a", **{"eval.success.score": 1.0, "eval.success.label": "pass"})
        + graded("a", **{"eval.success.error": "judge unreachable"})
        + graded("a", **{"eval.success.skipped": over_budget})
    )
    summary_path, page = tmp_path / "summary.json", tmp_path / "report.html"
    result = report(str(path), "--json", str(summary_path), "-o", str(page))
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_path.read_text())
    assert (summary["attempts"], summary["successes"], summary["ungraded"]) == (1, 1, 2)
    assert [(u["case_id"], u["reason"]) for u in summary["ungraded_attempts"]] == [
        ("a", "judge unreachable"),
        ("a", over_budget),
    ]
    assert all(len(u["trace_id"]) == 32 for u in summary["ungraded_attempts"])
    assert "TSR 1/1 = 1.000 · true rate 95% credible 0.1" in result.stdout and ", 2 attempts ungraded" in result.stdout
    assert "ungraded x1: judge unreachable" in result.stdout and f"ungraded x1: {over_budget}" in result.stdout
    assert "1 × judge unreachable" in page.read_text()
    path.write_text(
        graded("a", **{"eval.success.skipped": over_budget})
        + graded("a", **{"eval.success.error": "judge unreachable"})
    )
    result = report(str(path))
    assert result.returncode == 2
    assert f"all 2 attempts carry eval.success.error or .skipped (first: {over_budget})" in result.stderr


def shadow_file(tmp_path: Path) -> tuple[Path, Path]:
    """v1: Oslo 5/5, Paris 3/5; v2: Oslo 5/5, Paris 2/5: a 10-point TSR drop."""
    runs = (
        [("v1", "oslo", "Oslo")] * 5
        + [("v1", "paris", "Paris")] * 3
        + [("v1", "paris", "Lyon")] * 2
        + [("v2", "oslo", "Oslo")] * 5
        + [("v2", "paris", "Paris")] * 2
        + [("v2", "paris", "Lyon")] * 3
    )
    return score_suite(
        tmp_path, [attempt(case, city, resource={"service.version": version}) for version, case, city in runs]
    )


def test_report_by_an_attribute_splits_the_attempts(tmp_path):
    out, _ = shadow_file(tmp_path)
    summary_path = tmp_path / "summary.json"
    result = report(str(out), "--by", "service.version", "--json", str(summary_path))
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["by"] == "service.version" and list(summary["groups"]) == ["v1", "v2"]
    v1, v2 = summary["groups"]["v1"], summary["groups"]["v2"]
    assert (v1["attempts"], v1["successes"], v2["attempts"], v2["successes"]) == (10, 8, 10, 7)
    assert v2["cases"][1]["case_id"] == "paris" and v2["cases"][1]["successes"] == 2
    assert "service.version = v1\nTSR 8/10 = 0.800 · true rate 95% credible" in result.stdout


def test_compare_in_shadow_mode_reads_both_versions_from_one_file(tmp_path):
    out, _ = shadow_file(tmp_path)
    shadow = ("--by", "service.version", "--baseline", "v1", "--candidate", "v2")
    result = compare_one(out, *shadow)
    assert result.returncode == 1, result.stderr
    assert "baseline service.version=v1  TSR 8/10 = 0.800 · true rate 95% credible" in result.stdout
    assert "candidate service.version=v2 TSR 7/10 = 0.700 · true rate 95% credible" in result.stdout
    assert "regressed: paris 0.60 -> 0.40" in result.stdout
    # The same from a grouped summary; and an unchanged pair passes.
    summary_path = tmp_path / "grouped.json"
    assert report(str(out), "--by", "service.version", "--json", str(summary_path)).returncode == 0
    assert compare_one(summary_path, *shadow).stdout == result.stdout
    same = compare_one(out, "--by", "service.version", "--baseline", "v1", "--candidate", "v1")
    assert same.returncode == 0 and "drop +0.0 points" in same.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ("--by", "service.version", "--baseline", "v1", "--candidate", "v3"),
            "no attempts with service.version = 'v3'; found 'v1', 'v2'",
        ),
        (("--by", "service.version", "--baseline", "v1"), "with --by give one file, --baseline and --candidate"),
        (("--baseline", "v1", "--candidate", "v2"), "give BASELINE and CANDIDATE files"),
    ],
)
def test_shadow_mode_misuse_exits_two(tmp_path, arguments, message):
    out, _ = shadow_file(tmp_path)
    result = compare_one(out, *arguments)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_grouped_summary_needs_by_and_a_plain_one_refuses_it(tmp_path, scored):
    out, _ = scored
    plain, grouped = tmp_path / "plain.json", tmp_path / "grouped.json"
    assert report(str(out), "--json", str(plain)).returncode == 0
    assert report(str(out), "--by", "service.name", "--json", str(grouped)).returncode == 0
    result = compare(tmp_path, grouped, grouped)
    assert result.returncode == 2 and "a summary grouped by service.name" in result.stderr
    result = compare_one(plain, "--by", "service.name", "--baseline", "a", "--candidate", "b")
    assert result.returncode == 2 and "not grouped by service.name" in result.stderr


def judged(version: str, label: str) -> str:
    from spanscore.core.otlp_json import encode_request
    from tests.support.spans import new_trace_id, request_of, span

    score = 0.9 if label == "pass" else 0.2
    return (
        encode_request(
            request_of(
                [
                    span(
                        new_trace_id(),
                        "invoke_agent",
                        attributes={
                            "eval.task_completion.score": score,
                            "eval.task_completion.label": label,
                            "eval.task_completion.explanation": f"scored {score}",
                        },
                    )
                ],
                resource_attributes={"service.version": version},
            )
        )
        + "\n"
    )


def test_without_ground_truth_a_metric_pass_label_is_the_outcome(tmp_path):
    path = tmp_path / "live.jsonl"
    runs = [("v1", "pass")] * 18 + [("v1", "fail")] * 2 + [("v2", "pass")] * 14 + [("v2", "fail")] * 6
    path.write_text("".join(judged(version, label) for version, label in runs))
    summary_path = tmp_path / "summary.json"
    result = report(str(path), "--metric", "task_completion", "--by", "service.version", "--json", str(summary_path))
    assert result.returncode == 0, result.stderr
    groups = json.loads(summary_path.read_text())["groups"]
    assert (groups["v1"]["successes"], groups["v1"]["attempts"]) == (18, 20)
    assert groups["v1"]["outcome"] == "task_completion"
    assert groups["v2"]["cases"][0]["case_id"] == "(no case)"
    failure = groups["v2"]["cases"][0]["failures"][0]["findings"][0]
    assert failure == {"metric": "task_completion", "where": "invoke_agent", "score": 0.2, "text": "scored 0.2"}
    gate = compare_one(
        path, "--metric", "task_completion", "--by", "service.version", "--baseline", "v1", "--candidate", "v2"
    )
    assert gate.returncode == 1, gate.stderr
    assert "drop +20.0 points" in gate.stdout
    # Without --metric the same file holds no ground-truth verdicts.
    assert compare_one(path, "--by", "service.version", "--baseline", "v1", "--candidate", "v2").returncode == 2


def compare_one(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", "compare", str(path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
