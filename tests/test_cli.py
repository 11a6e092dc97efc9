"""The `spanscore` command: validate, and run until a signal with a full flush."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.support.ports import free_port
from tests.support.processes import ROOT, SPANSCORE, run_default_on, start_run
from tests.support.running import health_check_ok, wait_until


def test_validate_prints_a_summary_for_a_good_config():
    result = subprocess.run([*SPANSCORE, "validate", "otel-config.yaml"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines() == [
        "otel-config.yaml: valid; receivers: otlp; processors: assembler, embedding_metrics, rag_metrics, "
        "judge_metrics, failure_localization, session_metrics; "
        "exporters: file, debug; extensions: none; score metrics: prometheus"
    ]


def test_validate_lists_every_problem_and_fails(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "receivers: {otlp: {protocols: {grpc: {endpoint: nope}}}}\n"
        "exporters: {debug: {verbosity: loud}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], exporters: [debug, file]}}}\n"
    )
    result = subprocess.run([*SPANSCORE, "validate", str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"{bad}: 3 problems"
    assert lines[1].strip().startswith("receivers.otlp.protocols.grpc.endpoint:")
    assert lines[2].strip().startswith("exporters.debug.verbosity:")
    assert lines[3].strip() == "service.pipelines.traces.exporters[1]: 'file' is not defined under exporters"


def test_run_refuses_an_invalid_config_and_a_busy_port(tmp_path):
    result = subprocess.run(
        [*SPANSCORE, "run", "--config", str(tmp_path / "missing.yaml")], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2 and "cannot read" in result.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "busy.yaml"
        config.write_text(
            f"receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{port}'}}}}}}}}\n"
            "exporters: {debug: {}}\nservice: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}\n"
        )
        result = subprocess.run(
            [*SPANSCORE, "run", "--config", str(config)], capture_output=True, text=True, cwd=ROOT, timeout=30
        )
    assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_every_buffered_trace_and_exits_zero(signum, tmp_path):
    grpc_port, health_port = free_port(), free_port()
    output = tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: '127.0.0.1:{grpc_port}'}}
processors:
  assembler: {{trace_wait: 1h, trace_timeout: 2h}}   # nothing is released before the signal
exporters:
  file: {{path: '{output}'}}
extensions:
  health_check: {{endpoint: '127.0.0.1:{health_port}'}}
service:
  shutdown_timeout: 10s
  extensions: [health_check]
  pipelines:
    traces: {{receivers: [otlp], exporters: [file]}}
""")
    process = start_run(config)
    try:
        assert wait_until(lambda: health_check_ok(health_port), timeout_s=20), "collector did not come up"
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True))
        )
        tracer = provider.get_tracer("cli-test")
        for i in range(5):
            with tracer.start_as_current_span(f"agent turn {i}", attributes={"session.id": "cli"}):
                with tracer.start_as_current_span("llm call"):
                    pass
        provider.shutdown()
        time.sleep(0.2)
        assert not output.exists() or output.read_text() == ""
        sent = time.monotonic()
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert time.monotonic() - sent < 10
    names = [
        span["name"]
        for line in output.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    assert sorted(names) == sorted([f"agent turn {i}" for i in range(5)] + ["llm call"] * 5)
    assert "flushing and stopping" in stderr and "received 10 spans" in stderr


def test_run_without_a_config_uses_the_built_in_default_from_any_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):  # the offline default: no judge
        env.pop(name, None)
    result = run_default_on(ROOT / "examples" / "weather-agent.json", tmp_path, env)
    stdout, stderr = result.stdout, result.stderr
    assert result.returncode == 0, stderr
    assert "spanscore/otel-config.yaml: valid" in stderr
    assert "LLM-judge metrics not run (task_completion," in stderr and "no judge configured" in stderr
    lines = stdout.splitlines()
    assert len(lines) == 3, stdout
    for line, trace_id in zip(lines, ("5c00e5c00e0000000000000000000001", "5c0e5c0e000000000000000000000002")):
        assert line.startswith(
            f"trace {trace_id} root='invoke_agent weather-agent' spans=4 session=demo-session-1 scores: coherence="
        )
        assert " loop_detection=1.00 pass" in line  # the two answers share few words
    carrier = " root='evaluate_session' spans=1 session=demo-session-1 scores: "
    if " coherence=" in lines[1] and " fail," in lines[1].split(" coherence=")[1][:12]:
        # The second turn failed (MiniLM reads its answer as off the question) and was the
        # last: it broke the session, half of it before it; no span states why.
        assert carrier + "breaking_turn=0.50 none_found, agent_reliability=" in lines[2]
    else:
        assert carrier + "agent_reliability=" in lines[2]
    assert "agent_consistency=1.00 pass" in lines[2]  # no confidence signal without a judge
    written = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    spans = [span for doc in written for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]
    assert len(spans) == 9
    roots = [span for span in spans if span["name"] == "invoke_agent weather-agent"]
    assert all(
        {"eval.coherence.score", "eval.loop_detection.score"} <= {a["key"] for a in span["attributes"]}
        for span in roots
    )
