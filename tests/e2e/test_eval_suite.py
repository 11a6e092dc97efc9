"""An eval suite end to end: an agent process tagged only through OTEL_RESOURCE_ATTRIBUTES,
its spans sent by the OpenTelemetry SDK's OTLP/HTTP exporter to a running spanscore,
graded against the dataset by the `ground_truth` processor with the loopback judge;
then the same spans, recorded, graded offline by `spanscore score` to the same scores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.ground_truth_judge import DATASET, judge
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.otlp_json import read_requests
from tests.support.processes import ROOT, run_spanscore
from tests.support.running import wait_until

# The agent: two turns of one session, GenAI-convention spans, tagged by the environment only.
AGENT = r"""
import json, os, sys
sys.path.insert(0, os.environ["PROJECT_ROOT"])
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tests.support.otlp_json import JsonLinesSpanExporter

provider = TracerProvider(resource=Resource.create())  # reads OTEL_RESOURCE_ATTRIBUTES
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(os.environ["RECORD_TO"])))
tracer = provider.get_tracer("weather-agent")

def message(role, text):
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])

for question, answer, tool in (
    ("What's the weather in Oslo?", "It is Snowing, -3 C", ("get_weather", '{"city": "Oslo"}', "Snowing, -3 C")),
    ("What should I wear?", "Wear a wool coat", None),
):
    with tracer.start_as_current_span("invoke_agent weather") as span:
        span.set_attributes({"gen_ai.operation.name": "invoke_agent", "session.id": "attempt-7",
                             "gen_ai.input.messages": message("user", question)})
        if tool:
            with tracer.start_as_current_span("execute_tool get_weather") as call:
                call.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool[0],
                                     "gen_ai.tool.call.arguments": tool[1], "gen_ai.tool.call.result": tool[2]})
        span.set_attribute("gen_ai.output.messages", message("assistant", answer))
provider.shutdown()
"""


def judge_server_answer(request: RecordedRequest) -> Reply:
    return Reply(content=json.dumps(judge(request)))


def config(tmp_path: Path, judge_url: str, output: Path) -> str:
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    return f"""
receivers: {{otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 200ms}}
  ground_truth: {{dataset: {dataset}, trials: 1, judge: {{base_url: "{judge_url}", model: gpt-test}}}}
exporters: {{file: {{path: {output}}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, ground_truth], exporters: [file]}}
"""


def graded(path: Path) -> dict[str, dict]:
    """eval.* attributes of every span that has some, by span name and trace position."""
    found = {}
    for request in read_requests(path):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    evals = {kv.key: kv.value for kv in span.attributes if kv.key.startswith("eval.")}
                    question = next(
                        (kv.value.string_value for kv in span.attributes if kv.key == "gen_ai.input.messages"), ""
                    )
                    if evals:
                        found[f"{span.name} {question}"] = evals
    return found


def test_tagged_attempts_are_graded_live_and_offline_alike(tmp_path, start_collector):
    live, recorded, offline = tmp_path / "live.jsonl", tmp_path / "recorded.jsonl", tmp_path / "offline.jsonl"
    with OpenAIServer(handler=judge_server_answer) as server:
        collector = start_collector(config(tmp_path, server.base_url, live))
        environment = {
            "PROJECT_ROOT": str(ROOT),
            "RECORD_TO": str(recorded),
            "PATH": "/usr/bin:/bin",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=weather-agent,eval.case.id=oslo-trip",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector.http_port}/v1/traces",
        }
        agent = subprocess.run(
            [sys.executable, "-c", AGENT], env=environment, capture_output=True, text=True, timeout=60, check=False
        )
        assert agent.returncode == 0, agent.stderr
        assert wait_until(lambda: collector.pipeline.counts.exported_traces >= 2, timeout_s=10)
        collector.stop()  # the session closes: its carrier holds the attempt's results
        live_calls = len(server.requests)
        config_file = tmp_path / "offline.yaml"
        config_file.write_text(config(tmp_path, server.base_url, tmp_path / "unused.jsonl"))
        result = run_spanscore("score", recorded, "-o", offline, "--config", config_file, timeout=120)
        assert result.returncode == 0, result.stderr
        assert len(server.requests) == 2 * live_calls  # the same questions asked again offline

    live_grades = graded(live)
    carrier = next(v for k, v in live_grades.items() if k.startswith("evaluate_session"))
    assert carrier["eval.case.id"].string_value == "oslo-trip"
    assert carrier["eval.success.score"].double_value == 1.0
    assert carrier["eval.progress.score"].double_value == 1.0
    assert "Progress by turn: 0.50, 1.00" in carrier["eval.progress.explanation"].string_value
    # Subgoals: 2 requests (the second asks only the one left); the answer: 1; the check: 1.
    assert live_calls == 4
    assert graded(offline) == live_grades
