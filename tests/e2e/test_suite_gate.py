"""A suite's regression gate end to end: an agent process runs every attempt of a suite
and exports its spans with the OpenTelemetry SDK's OTLP/gRPC exporter to a running
spanscore that records them; `spanscore score --dataset` grades the recording offline;
`spanscore report --json` gives the counts and intervals a hand computation gives; and
`spanscore compare` fails on a 10-point drop and passes an unchanged rerun, both for two
summaries and in shadow mode (two agent versions in one recording, `--by service.version`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.running import wait_until
from tests.support.scored_suite import DATASET, recipe

ROOT = Path(__file__).resolve().parents[2]

# One trace per attempt: the case is a span attribute, the version a resource attribute
# (OTEL_RESOURCE_ATTRIBUTES), the city the agent asks for comes from the test.
AGENT = r"""
import json, os
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(insecure=True)))
tracer = provider.get_tracer("weather-agent")
for case, city in json.loads(os.environ["ATTEMPTS"]):
    with tracer.start_as_current_span("invoke_agent weather") as root:
        root.set_attributes({"gen_ai.operation.name": "invoke_agent", "eval.case.id": case,
                             "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                                 {"type": "text", "content": f"Weather for case {case}?"}]}])})
        with tracer.start_as_current_span("execute_tool get_weather") as call:
            call.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                                 "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                                 "gen_ai.tool.call.result": "Snowing, -3 C"})
        root.set_attribute("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": f"It is snowing in {city}, -3 C"}]}]))
provider.shutdown()
"""

# Baseline: Oslo 9 of 10, Paris 7 of 10 (TSR 0.8); candidate: Paris 5 of 10 (TSR 0.7).
BASELINE = [["oslo", "Oslo"]] * 9 + [["oslo", "Bergen"]] + [["paris", "Paris"]] * 7 + [["paris", "Lyon"]] * 3
CANDIDATE = [["oslo", "Oslo"]] * 9 + [["oslo", "Bergen"]] + [["paris", "Paris"]] * 5 + [["paris", "Lyon"]] * 5


def spanscore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", *args], cwd=ROOT, capture_output=True, text=True, timeout=180
    )


def test_attempts_over_loopback_are_scored_reported_and_gated(tmp_path, start_collector):
    recorded = tmp_path / "recorded.jsonl"
    collector = start_collector(f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors: {{assembler: {{trace_wait: 200ms}}}}
exporters: {{file: {{path: {recorded}}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: [assembler], exporters: [file]}}}}}}
""")
    runs = (("v1", BASELINE), ("v2", CANDIDATE), ("v1-rerun", BASELINE))
    for version, attempts in runs:
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "ATTEMPTS": json.dumps(attempts),
            "OTEL_RESOURCE_ATTRIBUTES": f"service.name=weather-agent,service.version={version}",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{collector.grpc_port}",
        }
        agent = subprocess.run(
            [sys.executable, "-c", AGENT], env=environment, capture_output=True, text=True, timeout=60, check=False
        )
        assert agent.returncode == 0, agent.stderr
    assert wait_until(lambda: collector.pipeline.counts.exported_traces >= 60, timeout_s=20)
    collector.stop()

    dataset, scored = tmp_path / "suite.yaml", tmp_path / "scored.jsonl"
    dataset.write_text(DATASET)
    result = spanscore("score", str(recorded), "--dataset", str(dataset), "-o", str(scored), "--quiet")
    assert result.returncode == 0, result.stderr

    grouped = tmp_path / "grouped.json"
    result = spanscore(
        "report",
        str(scored),
        "--dataset",
        str(dataset),
        "--by",
        "service.version",
        "--json",
        str(grouped),
        "-o",
        str(tmp_path / "report.html"),
    )
    assert result.returncode == 0, result.stderr
    groups = json.loads(grouped.read_text())["groups"]
    assert sorted(groups) == ["v1", "v1-rerun", "v2"]
    v1, v2 = groups["v1"], groups["v2"]
    assert (v1["attempts"], v1["successes"], v2["attempts"], v2["successes"]) == (20, 16, 20, 14)
    assert (v1["tsr"]["low"], v1["tsr"]["high"]) == recipe(16, 20)
    assert (v2["tsr"]["low"], v2["tsr"]["high"]) == recipe(14, 20)
    oslo, paris = v2["cases"]
    assert (oslo["successes"], paris["successes"]) == (9, 5)
    # pass@3 of 5 of 10: 1 - C(5,3)/C(10,3) = 1 - 10/120; pass^3: 10/120.
    assert abs(paris["pass_at_k"]["3"]["estimate"] - 110 / 120) < 1e-12
    assert abs(paris["pass_pow_k"]["3"]["estimate"] - 10 / 120) < 1e-12
    assert (paris["pass_at_k"]["3"]["low"], paris["pass_at_k"]["3"]["high"]) == recipe(
        5, 10, lambda p: 1 - (1 - p) ** 3
    )
    assert v1["ssr"]["estimate"] == 1.0  # every call is an expected tool and none failed
    assert groups["v1-rerun"]["tsr"] == v1["tsr"]

    # Two summaries, as a CI step would hold them.
    summaries = {}
    for version in ("v1", "v2", "v1-rerun"):
        summaries[version] = tmp_path / f"{version}.json"
        summaries[version].write_text(json.dumps(groups[version]))
    drop = spanscore("compare", str(summaries["v1"]), str(summaries["v2"]))
    assert drop.returncode == 1, drop.stderr
    assert "drop +10.0 points (allowed 5.0)" in drop.stdout and "regressed: paris 0.70 -> 0.50" in drop.stdout
    rerun = spanscore("compare", str(summaries["v1"]), str(summaries["v1-rerun"]))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "drop +0.0 points" in rerun.stdout

    # Shadow mode: both versions in the one scored file.
    shadow = spanscore("compare", str(scored), "--by", "service.version", "--baseline", "v1", "--candidate", "v2")
    assert shadow.returncode == 1, shadow.stderr
    assert shadow.stdout.splitlines()[2] == drop.stdout.splitlines()[2]  # the same drop and P(worse)
    same = spanscore("compare", str(scored), "--by", "service.version", "--baseline", "v1", "--candidate", "v1-rerun")
    assert same.returncode == 0
