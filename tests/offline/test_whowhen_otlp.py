"""bench/whowhen_otlp.py: Who&When runs as OTLP/JSON spans the normalizer reads step by step."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from bench import whowhen_otlp as whowhen
from spanscore.core.otlp_json import decode_request
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.processors.agent_trace import agent_trace_of

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "whowhen"
SCRIPT = ROOT / "bench" / "whowhen_otlp.py"
# Fixture file -> (run id, system, member name in an archive laid out as upstream's)
RUNS = {
    "Hand-Crafted-24.json": ("Hand-Crafted/24", "Magentic-One"),
    "Hand-Crafted-48.json": ("Hand-Crafted/48", "Magentic-One"),
    "Algorithm-Generated-38.json": ("Algorithm-Generated/38", "CaptainAgent"),
}


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def spans_of(request: dict[str, Any]) -> list[dict[str, Any]]:
    [resource_spans] = request["resourceSpans"]
    [scope_spans] = resource_spans["scopeSpans"]
    return scope_spans["spans"]


def attributes(span: dict[str, Any]) -> dict[str, str]:
    return {a["key"]: a["value"]["stringValue"] for a in span["attributes"]}


def trace_of(request: dict[str, Any]) -> Trace:
    decoded = decode_request(json.dumps(request))
    [resource_spans] = decoded.resource_spans
    [scope_spans] = resource_spans.scope_spans
    trace = Trace(scope_spans.spans[0].trace_id, now=0.0)
    origin = ScopeOrigin(resource_spans, scope_spans)
    for position, span in enumerate(scope_spans.spans):
        trace.add(position, span, origin)
    return trace


def make_archive(path: Path, runs: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in runs.items():
            info = tarfile.TarInfo(f"Who&When/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


@pytest.mark.parametrize("fixture", sorted(RUNS))
def test_spans_of_a_run(fixture: str):
    run = load(fixture)
    run_id, system = RUNS[fixture]
    history = run["history"]
    spans = spans_of(whowhen.convert_run(run, run_id))
    root, steps = spans[0], spans[1:]

    assert len(spans) == len(history) + 1
    assert root["name"] == f"invoke_agent {system}"
    assert "parentSpanId" not in root
    assert {span["traceId"] for span in spans} == {whowhen.trace_id(run_id)}
    assert root["spanId"] == whowhen.root_span_id(run_id)
    root_attributes = attributes(root)
    assert root_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root_attributes["session.id"] == root_attributes["gen_ai.conversation.id"] == run_id
    [question] = json.loads(root_attributes["gen_ai.input.messages"])
    assert question["parts"] == [{"type": "text", "content": run["question"]}]
    [answer] = json.loads(root_attributes["gen_ai.output.messages"])
    assert answer["parts"][0]["content"] == history[-1]["content"]

    assert [span["parentSpanId"] for span in steps] == [root["spanId"]] * len(history)
    assert [span["spanId"] for span in steps] == [whowhen.step_span_id(run_id, i) for i in range(len(history))]
    assert [span["name"] for span in steps] == [step.get("name") or step["role"] for step in history]
    for span, step in zip(steps, history):
        step_attributes = attributes(span)
        assert step_attributes["gen_ai.operation.name"] == "chat"
        assert step_attributes["gen_ai.agent.name"] == span["name"]
        [message] = json.loads(step_attributes["gen_ai.output.messages"])
        assert message["parts"] == [{"type": "text", "content": step["content"]}]
    starts = [int(span["startTimeUnixNano"]) for span in steps]
    assert [b - a for a, b in zip(starts, starts[1:])] == [whowhen.STEP_NANOS] * (len(history) - 1)
    assert int(root["startTimeUnixNano"]) <= starts[0]
    assert int(root["endTimeUnixNano"]) >= int(steps[-1]["endTimeUnixNano"])


def test_step_names_of_a_magentic_one_run():
    spans = spans_of(whowhen.convert_run(load("Hand-Crafted-48.json"), "Hand-Crafted/48"))
    assert [span["name"] for span in spans[1:]] == [
        "human",
        "Orchestrator (thought)",
        "Orchestrator (thought)",
        "Orchestrator (-> WebSurfer)",
        "WebSurfer",
    ]


@pytest.mark.parametrize("fixture", sorted(RUNS))
def test_normalizer_reads_one_step_per_history_entry_in_order(fixture: str):
    run = load(fixture)
    run_id, system = RUNS[fixture]
    history = run["history"]
    agent_trace = agent_trace_of(trace_of(whowhen.convert_run(run, run_id)))

    assert agent_trace.recognized
    assert [step.span_id for step in agent_trace.steps] == [
        whowhen.step_span_id(run_id, i) for i in range(len(history))
    ]
    assert [step.kind for step in agent_trace.steps] == ["llm"] * len(history)
    assert [step.name for step in agent_trace.steps] == [step.get("name") or step["role"] for step in history]
    assert [step.result for step in agent_trace.steps] == [step["content"] or None for step in history]
    assert agent_trace.agent_name == system
    assert agent_trace.user_input == run["question"].strip()
    assert agent_trace.final_output == history[-1]["content"].strip()


@pytest.mark.parametrize("fixture", sorted(RUNS))
def test_labelled_step_maps_to_the_labelled_agents_span(fixture: str):
    run = load(fixture)
    run_id, _ = RUNS[fixture]
    spans = {span["spanId"]: span for span in spans_of(whowhen.convert_run(run, run_id))}
    span = spans[whowhen.step_span_id(run_id, int(run["mistake_step"]))]
    assert span["name"].startswith(run["mistake_agent"])


def test_span_ids_are_deterministic_and_distinct():
    assert whowhen.step_span_id("Hand-Crafted/24", 3) == whowhen.step_span_id("Hand-Crafted/24", 3)
    ids = {whowhen.step_span_id(run, i) for run in ("Hand-Crafted/24", "Hand-Crafted/48") for i in range(50)}
    assert len(ids) == 100
    assert all(len(span_id) == 16 and int(span_id, 16) > 0 for span_id in ids)
    assert len(whowhen.trace_id("Hand-Crafted/24")) == 32


def test_a_run_without_history_is_refused():
    with pytest.raises(whowhen.RunError, match="history"):
        whowhen.convert_run({"question": "q"}, "Hand-Crafted/1")
    with pytest.raises(whowhen.RunError, match=r"history\[1\]"):
        whowhen.convert_run({"history": [{"content": "a", "role": "user"}, {"role": "user"}]}, "x/1")


def test_cli_converts_an_archive(tmp_path: Path):
    archive = make_archive(
        tmp_path / "who-and-when.tar.gz",
        {f"{run_id}.json": (FIXTURES / name).read_bytes() for name, (run_id, _) in RUNS.items()},
    )
    out = tmp_path / "runs.jsonl.gz"
    result = run_cli(str(archive), "-o", str(out))
    assert result.returncode == 0, result.stderr
    lines = gzip.decompress(out.read_bytes()).decode("utf-8").splitlines()
    history_lengths = {run_id: len(load(name)["history"]) for name, (run_id, _) in RUNS.items()}
    span_counts = {}
    for line in lines:
        [resource_spans] = decode_request(line).resource_spans  # a valid OTLP/JSON request
        session = attributes(spans_of(json.loads(line))[0])["session.id"]
        span_counts[session] = len(resource_spans.scope_spans[0].spans)
    assert span_counts == {run_id: length + 1 for run_id, length in history_lengths.items()}
    assert len(lines) == 3
    assert "3 runs written" in result.stderr


def test_cli_missing_file(tmp_path: Path):
    result = run_cli(str(tmp_path / "absent.tar.gz"), "-o", str(tmp_path / "out.jsonl"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "absent.tar.gz: no such file" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_cli_not_a_tarball(tmp_path: Path):
    text = tmp_path / "runs.json"
    text.write_text('{"history": []}\n')
    result = run_cli(str(text), "-o", str(tmp_path / "out.jsonl"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "runs.json: not a tar archive" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_run_without_history(tmp_path: Path):
    archive = make_archive(
        tmp_path / "broken.tar.gz",
        {
            "Hand-Crafted/24.json": (FIXTURES / "Hand-Crafted-24.json").read_bytes(),
            "Hand-Crafted/7.json": json.dumps({"question": "q", "mistake_step": "0"}).encode(),
        },
    )
    result = run_cli(str(archive), "-o", str(tmp_path / "out.jsonl"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "Who&When/Hand-Crafted/7.json: no `history` list" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
