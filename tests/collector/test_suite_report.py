"""`spanscore report`: graded attempts read back from a scored file, counted per case, with
the estimates and intervals a hand computation gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spanscore.collector.config import parse_config
from spanscore.collector.score_files import score_files
from spanscore.core.otlp_json import encode_request
from tests.support.factories import TEST_FACTORIES
from tests.support.spans import new_span_id, new_trace_id, request_of, span

ROOT = Path(__file__).resolve().parents[2]

DATASET = """
cases:
  - id: oslo
    user_instruction: Weather in Oslo
    expected_tool_calls: [{tool: get_weather, parameters: [{name: city, value: Oslo}]}]
  - id: paris
    user_instruction: Weather in Paris
    expected_tool_calls: [{tool: get_weather, parameters: [{name: city, value: Paris}]}]
"""

# (case, the city the agent asked for, another tool it called too)
ATTEMPTS = [("oslo", "Oslo", None)] * 4 + [("oslo", "Bergen", None)] + \
           [("paris", "Paris", "search"), ("paris", "Lyon", None), ("paris", "Nice", None)]


def attempt(case_id: str, city: str, extra: str | None):
    trace_id, root = new_trace_id(), new_span_id()
    spans = [span(trace_id, "invoke_agent weather", span_id=root, attributes={
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "weather?"}]}]'})]
    for tool, arguments in (("get_weather", f'{{"city": "{city}"}}'), (extra, "{}")):
        if tool:
            spans.append(span(trace_id, f"execute_tool {tool}", parent=root, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                "gen_ai.tool.call.arguments": arguments, "gen_ai.tool.call.result": "ok"}))
    return request_of(spans, resource_attributes={"eval.case.id": case_id})


def recipe(successes: int, total: int, statistic=lambda p: p) -> tuple[float, float]:
    """SUITES.md's Bayesian interval, computed here the way it is written there."""
    rng = np.random.default_rng(42)
    samples = statistic(rng.beta(1 + successes, 1 + total - successes, size=5000))
    low, high = np.quantile(samples, [0.025, 0.975])
    return float(low), float(high)


@pytest.fixture
def scored(tmp_path) -> tuple[Path, Path]:
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text("".join(encode_request(attempt(*a)) + "\n" for a in ATTEMPTS))
    config = parse_config(f"""
receivers: {{otlp: {{}}}}
processors: {{ground_truth: {{dataset: {dataset}}}}}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler, ground_truth], exporters: [debug]}}}}}}
""", factories=TEST_FACTORIES)
    import asyncio

    out = tmp_path / "scored.jsonl"
    summary = asyncio.run(score_files([recorded], config, out))
    assert summary.problems == []
    return out, dataset


def test_the_summary_holds_the_hand_computed_counts_and_intervals(scored, tmp_path):
    out, dataset = scored
    summary_path = tmp_path / "summary.json"
    result = subprocess.run([sys.executable, "-m", "spanscore", "report", str(out), "--dataset", str(dataset),
                             "--json", str(summary_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_path.read_text())
    # 4 of 5 Oslo attempts and 1 of 3 Paris attempts asked for the expected city.
    assert summary["tsr"] == {"estimate": 5 / 8, "low": recipe(5, 8)[0], "high": recipe(5, 8)[1]}
    # No tool call failed; `search` is not expected by its case: per attempt 1 (five Oslo
    # attempts), 1/2 ([get_weather, search]), 1, 1 -> mean 7.5 / 8.
    assert summary["ssr"]["estimate"] == 7.5 / 8
    oslo, paris = summary["cases"]
    assert (oslo["case_id"], oslo["attempts"], oslo["successes"]) == ("oslo", 5, 4)
    assert oslo["pass_at_k"]["1"]["estimate"] == pytest.approx(4 / 5)
    assert oslo["pass_at_k"]["3"]["estimate"] == 1.0  # 1 - C(1,3)/C(5,3) = 1 - 0/10
    assert oslo["pass_pow_k"]["3"]["estimate"] == pytest.approx(4 / 10)  # C(4,3)/C(5,3)
    assert oslo["pass_pow_k"]["3"]["low"] == recipe(4, 5, lambda p: p ** 3)[0]
    assert set(paris["pass_at_k"]) == {"1", "3"}  # k = 5 exceeds its 3 attempts
    assert paris["pass_pow_k"]["3"]["estimate"] == 0.0  # C(1,3)/C(3,3)
    assert oslo["trajectory_similarity"] == 1.0
    # [gw, search] vs [gw] twice: 1/2 each; [gw] vs [gw]: 1 -> mean 2/3
    assert paris["trajectory_similarity"] == pytest.approx(2 / 3)
    assert "TSR 0.625" in result.stdout


def test_files_without_graded_attempts_say_so(tmp_path):
    plain = ROOT / "examples" / "weather-agent.json"
    result = subprocess.run([sys.executable, "-m", "spanscore", "report", str(plain)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no graded attempts found" in result.stderr


def summary_of(attempts: int, successes: int, cases: dict[str, tuple[int, int]]) -> dict:
    from spanscore.processors.metrics.intervals import success_rate_interval

    interval = success_rate_interval(successes, attempts)
    return {"attempts": attempts, "successes": successes,
            "tsr": {"estimate": successes / attempts, "low": interval.low, "high": interval.high}, "ssr": None,
            "cases": [{"case_id": case, "attempts": n, "successes": c} for case, (n, c) in cases.items()]}


def compare(tmp_path: Path, baseline: dict | Path, candidate: dict | Path, *extra: str):
    paths = []
    for name, value in (("baseline.json", baseline), ("candidate.json", candidate)):
        if isinstance(value, dict):
            path = tmp_path / name
            path.write_text(json.dumps(value))
            value = path
        paths.append(str(value))
    return subprocess.run([sys.executable, "-m", "spanscore", "compare", *paths, *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


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
