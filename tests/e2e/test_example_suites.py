"""The example suites on the example session, through the command line: `spanscore score
examples/weather-agent.json --dataset SUITE` with the default config, then `spanscore
report`. The session (Paris, then Lyon) answers in sentences, never in the tools' JSON:

- examples/weather-suite.yaml, with a loopback judge approving everything (subgoals
  complete, answers scored 0.8 for the 0.7 threshold, using the tool results, checks
  passing): the paris-then-lyon attempt succeeds; with a copy of the session whose answers
  ignore the tool results, the judge saying so, it fails on utilization;
- examples/weather-suite-no-judge.yaml, with no judge at all: the session succeeds, and
  the copy fails on utilization, decided by the values of the results not in the answers.

And `spanscore validate` accepts a config naming either suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_json import read_requests

ROOT = Path(__file__).resolve().parents[2]
SESSION = ROOT / "examples" / "weather-agent.json"
JUDGED_SUITE = ROOT / "examples" / "weather-suite.yaml"
NO_JUDGE_SUITE = ROOT / "examples" / "weather-suite-no-judge.yaml"
IGNORING = "I can't check the weather right now."


def spanscore(*args: str, judge_url: str | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SPANSCORE_"))}
    if judge_url is not None:  # the default config's judge, as a user points it elsewhere
        environment |= {"OPENAI_BASE_URL": judge_url, "OPENAI_API_KEY": "test-key", "SPANSCORE_JUDGE_MODEL": "gpt-test"}
    return subprocess.run(
        [sys.executable, "-m", "spanscore", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("suite", [JUDGED_SUITE, NO_JUDGE_SUITE], ids=lambda path: path.name)
def test_spanscore_validate_loads_each_example_suite(suite, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers: {{otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:0}}}}}}}}
processors: {{ground_truth: {{dataset: {suite}}}}}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler, ground_truth], exporters: [debug]}}}}}}
""")
    result = spanscore("validate", str(config))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{config}: valid; receivers: otlp; processors: assembler, ground_truth;")


def ignoring_session(tmp_path: Path) -> Path:
    """The example session with every final answer replaced by one that ignores the tools."""
    request = json.loads(SESSION.read_text())
    answer = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": IGNORING}]}])
    replaced = 0
    for resource_spans in request["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for attribute in span["attributes"]:
                    if attribute["key"] == "gen_ai.output.messages":
                        attribute["value"] = {"stringValue": answer}
                        replaced += 1
    assert replaced == 2  # one answer per turn
    path = tmp_path / "ignoring-agent.json"
    path.write_text(json.dumps(request))
    return path


def score_and_report(tmp_path: Path, session: Path, suite: Path, judge_url: str | None = None) -> dict:
    """`score` then `report --json`, both exiting 0: the summary, with the tool-usage
    explanations of the scored turns under "tool_usage"."""
    scored, summary = tmp_path / f"{session.stem}.scored.jsonl", tmp_path / f"{session.stem}.summary.json"
    result = spanscore("score", str(session), "--dataset", str(suite), "-o", str(scored), judge_url=judge_url)
    assert result.returncode == 0, result.stderr
    result = spanscore("report", str(scored), "--dataset", str(suite), "--json", str(summary))
    assert result.returncode == 0, result.stderr
    report = json.loads(summary.read_text())
    report["text"] = result.stdout
    report["tool_usage"] = sorted(
        kv.value.string_value
        for request in read_requests(scored)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
        for kv in span.attributes
        if kv.key == "eval.tool_usage.explanation"
    )
    return report


def findings(report: dict) -> dict[str, list[str]]:
    """metric -> explanations of the failed or errored results of the one case's failed attempt."""
    [case] = report["cases"]
    [failure] = case["failures"]
    found: dict[str, list[str]] = {}
    for finding in failure["findings"]:
        found.setdefault(finding["metric"], []).append(finding["text"])
    return {metric: sorted(texts) for metric, texts in found.items()}


def test_the_example_session_passes_the_judged_suite_and_ignoring_the_tools_fails_it(tmp_path):
    with OpenAIServer(handler=schema_judge(score=0.8)) as server:
        report = score_and_report(tmp_path, SESSION, JUDGED_SUITE, server.base_url)
        assert any(r.body["response_format"]["json_schema"]["name"] == "answer_correctness" for r in server.requests)
    assert (report["attempts"], report["successes"], report["ungraded"]) == (1, 1, 0)
    assert report["cases"][0]["case_id"] == "paris-then-lyon"
    assert "TSR 1/1 = 1.000 · true rate 95% credible" in report["text"]
    assert "paris-then-lyon: 1/1 succeeded" in report["text"]
    assert report["tool_usage"] == [
        f"Tool usage 1.00 (turn {turn}): selection 1.00, parameters 1.00, sequence 1.00, utilization 1.00 (judge)."
        for turn in (0, 1)
    ]

    refusing = schema_judge(
        score=0.8,
        overrides={
            "answer_correctness": {
                "reasoning": "does not state the weather",
                "correctness_score": 0.8,
                "uses_tool_results": False,
            }
        },
    )
    with OpenAIServer(handler=refusing) as server:
        report = score_and_report(tmp_path, ignoring_session(tmp_path), JUDGED_SUITE, server.base_url)
    assert (report["attempts"], report["successes"], report["ungraded"]) == (1, 0, 0)
    assert "paris-then-lyon: 0/1 succeeded" in report["text"]
    failed = findings(report)
    # 0.25 x (1 + 1 + 1 + 0) on each turn, below tool_threshold 1.0; so both answers are wrong.
    assert failed["tool_usage"] == [
        f"Tool usage 0.75 (turn {turn}): selection 1.00, parameters 1.00, sequence 1.00, utilization 0.00 (judge)."
        for turn in (0, 1)
    ]
    assert failed["conversation_correctness"][0].startswith("0 of 2 graded answers correct; wrong at turns [0, 1]")
    assert failed["success"] == ["Failed: every turn's tool usage at tool_threshold, every graded answer correct"]


def test_the_example_session_passes_the_suite_that_needs_no_judge_and_ignoring_the_tools_fails_it(tmp_path):
    report = score_and_report(tmp_path, SESSION, NO_JUDGE_SUITE)
    assert (report["attempts"], report["successes"], report["ungraded"]) == (1, 1, 0)
    assert "TSR 1/1 = 1.000 · true rate 95% credible" in report["text"]
    assert "paris-then-lyon: 1/1 succeeded" in report["text"]
    # The answers state each result's temperature and sky, not its JSON.
    assert report["tool_usage"] == [
        "Tool usage 1.00 (turn 0): selection 1.00, parameters 1.00, sequence 1.00, utilization 1.00"
        " (values found: 21, sunny).",
        "Tool usage 1.00 (turn 1): selection 1.00, parameters 1.00, sequence 1.00, utilization 1.00"
        " (values found: 17, light rain).",
    ]

    report = score_and_report(tmp_path, ignoring_session(tmp_path), NO_JUDGE_SUITE)
    assert (report["attempts"], report["successes"], report["ungraded"]) == (1, 0, 0)
    failed = findings(report)
    # Values looked for: 21 and "sunny", then 17, "light rain", "light" and "rain"; the
    # cities were asked about.
    assert failed["tool_usage"] == [
        f"Tool usage 0.75 (turn {turn}): selection 1.00, parameters 1.00, sequence 1.00, utilization 0.00"
        f" (none of the {values} values of the tool results found in the answer)."
        for turn, values in ((0, 2), (1, 4))
    ]
    assert failed["success"] == ["Failed: every turn's tool usage at tool_threshold"]
