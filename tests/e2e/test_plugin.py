"""The example plugin (examples/plugin) as a user runs it: installed, named in a config,
loaded by the real `spanscore` command through its entry point.

Skipped when the plugin is not installed, unless SPANSCORE_REQUIRE_PLUGIN=1 (as in CI,
which installs it), where its absence fails.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import decode_request
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.ports import free_port
from tests.support.running import wait_until

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "weather-agent.json"
REQUIRE_ENV = "SPANSCORE_REQUIRE_PLUGIN"
ENTRY_POINT_GROUP = "spanscore.components"
ROOT_NAME = "invoke_agent weather-agent"
PARIS, LYON = "5c00e5c00e0000000000000000000001", "5c0e5c0e000000000000000000000002"
RETRIED = "7e57000000000000000000000000000a"  # the Paris trace again, its first tool call failed


def spanscore_command() -> list[str]:
    script = Path(sys.executable).parent / "spanscore"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "spanscore"]


@pytest.fixture(autouse=True)
def plugin_installed() -> None:
    if not any(ep.name == "tool_success" for ep in entry_points(group=ENTRY_POINT_GROUP)):
        message = "the example plugin is not installed (pip install ./examples/plugin)"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}, and {REQUIRE_ENV}=1 requires it")
        pytest.skip(message)


def write_config(tmp_path: Path, http_port: int, output: Path, judge: str = "") -> Path:
    config = tmp_path / "config.yaml"
    settings = "threshold: 0.6" + (f", judge: {{{judge}}}" if judge else "")
    config.write_text(f"""
receivers:
  otlp:
    protocols:
      http: {{endpoint: '127.0.0.1:{http_port}'}}
processors:
  assembler: {{trace_wait: 100ms}}
  tool_success: {{{settings}}}
exporters:
  file: {{path: '{output}'}}
service:
  shutdown_timeout: 10s
  pipelines:
    traces:
      receivers: [otlp]
      processors: [assembler, tool_success]
      exporters: [file]
""")
    return config


def retried_trace(sample: dict) -> dict:
    """The sample's Paris trace under a new trace id, with a failed tool call before the one that worked."""
    document = copy.deepcopy(sample)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            spans = [span for span in scope_spans["spans"] if span["traceId"] == PARIS]
            for span in spans:
                span["traceId"] = RETRIED
            tool = next(span for span in spans if span["name"] == "execute_tool get_weather")
            failed = copy.deepcopy(tool)
            failed["spanId"] = "010000000000011a"
            failed["startTimeUnixNano"] = str(int(tool["startTimeUnixNano"]) - 1_000_000)
            failed["attributes"] = [a for a in failed["attributes"] if a["key"] != "gen_ai.tool.call.result"]
            failed["status"] = {"code": 2, "message": "weather service timed out"}
            spans.append(failed)
            scope_spans["spans"] = spans
    return document


def post(port: int, body: bytes) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def scored_roots(output: Path) -> dict[str, dict]:
    """Root spans written so far, by trace id, with their attributes as a dict."""
    if not output.exists():
        return {}
    roots = {}
    for line in output.read_text().splitlines(keepends=True):
        if not line.endswith("\n"):  # still being written
            break
        for resource_spans in decode_request(line).resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if span.name == ROOT_NAME:
                        roots[span.trace_id.hex()] = attributes_to_dict(span.attributes)
    return roots


def test_run_scores_tool_success_through_the_installed_plugin(tmp_path):
    http_port = free_port()
    output = tmp_path / "scored.jsonl"
    config = write_config(tmp_path, http_port, output)
    sample = json.loads(SAMPLE.read_text())
    run_collector(
        config, tmp_path, http_port, output, 3, SAMPLE.read_bytes(), json.dumps(retried_trace(sample)).encode()
    )

    roots = scored_roots(output)
    assert set(roots) == {PARIS, LYON, RETRIED}
    # By hand, from examples/weather-agent.json: each of its two traces has exactly one
    # tool span (`execute_tool get_weather`, for Paris and for Lyon), both with a
    # `gen_ai.tool.call.result` and no error status, so 1 of 1 succeeded: 1/1 = 1.0,
    # `pass` at threshold 0.6. The retried copy of the Paris trace adds a tool span with
    # an error status: 1 of 2 succeeded, 1/2 = 0.5 < 0.6, `fail`.
    expected = {
        PARIS: (1.0, "pass", "1 of 1 tool calls succeeded."),
        LYON: (1.0, "pass", "1 of 1 tool calls succeeded."),
        RETRIED: (0.5, "fail", "1 of 2 tool calls succeeded. Failed: get_weather: weather service timed out"),
    }
    for trace_id, (score, label, explanation) in expected.items():
        attributes = roots[trace_id]
        assert attributes["eval.tool_success.score"] == score, trace_id
        assert attributes["eval.tool_success.label"] == label, trace_id
        assert attributes["eval.tool_success.explanation"] == explanation, trace_id


def test_validate_accepts_a_config_naming_the_plugin(tmp_path):
    config = write_config(tmp_path, free_port(), tmp_path / "scored.jsonl")
    result = subprocess.run(
        [*spanscore_command(), "validate", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "processors: assembler, tool_success;" in result.stdout


def run_collector(config: Path, cwd: Path, http_port: int, output: Path, traces: int, *bodies: bytes) -> str:
    """Runs `spanscore run` until `traces` roots are scored, then stops it; its stderr."""
    process = subprocess.Popen(
        [*spanscore_command(), "run", "--config", str(config)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:

        def accepting() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", http_port)) == 0

        assert wait_until(accepting, timeout_s=20), "collector did not come up"
        for body in bodies:
            post(http_port, body)
        assert wait_until(lambda: len(scored_roots(output)) == traces, timeout_s=20), "traces were not scored"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    return stderr


def rate_politeness(request: RecordedRequest) -> Reply:
    """The loopback judge: Paris's reply rated 5, any other 3 (plumbing, not judgment)."""
    content = request.messages()[-1]["content"]
    rating = 5 if "Paris" in content else 3
    return Reply(content=json.dumps({"reason": f"rated {rating} by the loopback judge", "rating": rating}))


def test_the_plugin_asks_the_configured_judge_for_politeness(tmp_path):
    http_port = free_port()
    output = tmp_path / "scored.jsonl"
    with OpenAIServer(handler=rate_politeness, model="judge-model") as judge:
        section = f"model: judge-model, base_url: '{judge.base_url}', cache: {{enabled: false}}"
        config = write_config(tmp_path, http_port, output, judge=section)
        run_collector(config, tmp_path, http_port, output, 2, SAMPLE.read_bytes())
        requests = judge.requests_to("/chat/completions")
    roots = scored_roots(output)
    # By hand: the loopback judge rates Paris's reply 5 -> (5 - 1) / 4 = 1.0, Lyon's 3 -> 0.5.
    for trace_id, (score, label, rating) in {PARIS: (1.0, "pass", 5), LYON: (0.5, "pass", 3)}.items():
        attributes = roots[trace_id]
        assert attributes["eval.politeness.score"] == score, trace_id
        assert attributes["eval.politeness.label"] == label, trace_id
        assert attributes["eval.politeness.explanation"] == f"rated {rating} of 5: rated {rating} by the loopback judge"
        assert attributes["eval.politeness.evaluator"] == "judge-model"
        assert attributes["eval.judge.calls"] == 1, trace_id
        assert attributes["eval.tool_success.score"] == 1.0, trace_id
    assert len(requests) == 2
    replies = sorted(request.messages()[-1]["content"].split("</trace_data>")[0] for request in requests)
    assert replies == [
        "<trace_data>\nreply: It is 21°C and sunny in Paris.\n",
        "<trace_data>\nreply: Lyon has light rain at 17°C.\n",
    ]


def test_past_the_judge_s_budget_the_plugin_s_metric_is_skipped(tmp_path):
    http_port = free_port()
    output = tmp_path / "scored.jsonl"
    with OpenAIServer(handler=rate_politeness, model="judge-model") as judge:
        section = (
            f"model: judge-model, base_url: '{judge.base_url}', cache: {{enabled: false}}, "
            "budget: {requests_per_hour: 1}"
        )
        config = write_config(tmp_path, http_port, output, judge=section)
        run_collector(config, tmp_path, http_port, output, 2, SAMPLE.read_bytes())
        requests = judge.requests_to("/chat/completions")
    roots = scored_roots(output)
    judged = [trace for trace in (PARIS, LYON) if "eval.politeness.score" in roots[trace]]
    skipped = [trace for trace in (PARIS, LYON) if "eval.politeness.skipped" in roots[trace]]
    # One request an hour: the first trace asked is judged, the other skipped, not failed.
    assert len(requests) == 1 and len(judged) == 1 and len(skipped) == 1
    [other] = skipped
    assert "budget" in roots[other]["eval.politeness.skipped"]
    assert "eval.politeness.error" not in roots[other] and "eval.judge.calls" not in roots[other]
    assert roots[judged[0]]["eval.judge.calls"] == 1
    assert roots[other]["eval.tool_success.score"] == 1.0
