"""`spanscore inspect`: the real command, run as a subprocess on OTLP/JSON files, printing
per trace what the metrics would read and whether the trace would be scored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_json import encode_request
from spanscore.core.result import MetricResult
from spanscore.core.session import Session, TraceSummary
from spanscore.pipeline.score_attributes import session_carrier
from tests.support.agent_fixtures import AGENT_NAME, FINAL_ANSWER, QUESTION, SESSION_ID, SPANS_DIR, WEATHER_REPORT
from tests.support.otlp_json import read_requests
from tests.support.span_metric import scored_run
from tests.support.spans import AGENT_ROOT, request_of, span

ROOT = Path(__file__).resolve().parents[2]
WEATHER = ROOT / "examples" / "weather-agent.json"  # one pretty-printed request, two traces
SPEC_EXAMPLE = ROOT / "examples" / "otlp-spec-trace.json"
NOT_AGENT = (
    "not an agent trace (no agent run found in GenAI, OpenInference, OpenLLMetry, Langfuse or Vercel AI SDK attributes)"
)

# The conventions each captured fixture is read with.
FIXTURE_CONVENTIONS = {
    "genai_v2": ["genai"],
    "genai_v2_latest": ["genai"],
    "langfuse": ["langfuse"],
    "openai_agents": ["openinference"],
    "openinference": ["openinference"],
    "openllmetry": ["genai", "openllmetry"],
}


def inspect(*arguments: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", "inspect", *map(str, arguments)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def json_records(result: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def agent_line(trace_id: bytes, name: str) -> str:
    """One OTLP/JSON line holding a one-span agent trace."""
    return encode_request(request_of([span(trace_id, name, attributes=AGENT_ROOT)]))


def trace_id_of(path: Path) -> str:
    [trace_id] = {
        s.trace_id.hex()
        for r in read_requests(path)
        for rs in r.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }
    return trace_id


def test_the_sample_session_and_the_spec_example_read_as_two_agent_traces_and_one_unscored():
    result = inspect(WEATHER, SPEC_EXAMPLE)
    assert (result.returncode, result.stderr) == (0, "")
    assert (
        result.stdout
        == """\
trace 5c00e5c00e0000000000000000000001 root='invoke_agent weather-agent' spans=4 service=weather-agent
  conventions: genai; scored: yes
  session: demo-session-1  agent: weather-agent
  user input:   "What's the weather in Paris?"
  final output: "It is 21°C and sunny in Paris."
  steps: 3
    1. llm chat gpt-4o-mini
    2. tool get_weather  arguments={"city": "Paris"}  result={"temp_c": 21, "sky": "sunny"}
    3. llm chat gpt-4o-mini

trace 5c0e5c0e000000000000000000000002 root='invoke_agent weather-agent' spans=4 service=weather-agent
  conventions: genai; scored: yes
  session: demo-session-1  agent: weather-agent
  user input:   "And in Lyon?"
  final output: "Lyon has light rain at 17°C."
  steps: 3
    1. llm chat gpt-4o-mini
    2. tool get_weather  arguments={"city": "Lyon"}  result={"temp_c": 17, "sky": "light rain"}
    3. llm chat gpt-4o-mini

trace 5b8efff798038103d269b633813fc60c first="I'm a server span" spans=1 service=my.service (incomplete: no root span)
  conventions: none; scored: no, not an agent trace (no agent run found in GenAI, OpenInference, OpenLLMetry, \
Langfuse or Vercel AI SDK attributes)

3 traces in 2 files (OTLP/JSON); 2 would be scored
"""
    )


def test_json_gives_one_object_per_trace_with_every_field_the_metrics_read():
    result = inspect("--json", WEATHER, SPEC_EXAMPLE)
    assert (result.returncode, result.stderr) == (0, "")
    first, second, spec = json_records(result)
    assert first == {
        "trace_id": "5c00e5c00e0000000000000000000001",
        "kind": "trace",
        "service": "weather-agent",
        "root": "invoke_agent weather-agent",
        "complete": True,
        "spans": 4,
        "session_id": "demo-session-1",
        "scored": True,
        "not_scored_because": None,
        "recognized": True,
        "conventions": ["genai"],
        "agent_name": "weather-agent",
        "user_input": "What's the weather in Paris?",
        "final_output": "It is 21°C and sunny in Paris.",
        "steps": [
            {"kind": "llm", "name": "chat gpt-4o-mini", "arguments": None, "result": None, "error": None},
            {
                "kind": "tool",
                "name": "get_weather",
                "arguments": {"city": "Paris"},
                "result": '{"temp_c": 21, "sky": "sunny"}',
                "error": None,
            },
            {"kind": "llm", "name": "chat gpt-4o-mini", "arguments": None, "result": None, "error": None},
        ],
        "scores": {},
    }
    assert (second["trace_id"], second["user_input"], second["final_output"]) == (
        "5c0e5c0e000000000000000000000002",
        "And in Lyon?",
        "Lyon has light rain at 17°C.",
    )
    assert spec == {
        "trace_id": "5b8efff798038103d269b633813fc60c",
        "kind": "trace",
        "service": "my.service",
        "root": "I'm a server span",
        "complete": False,
        "spans": 1,
        "session_id": None,
        "scored": False,
        "not_scored_because": NOT_AGENT,
        "recognized": False,
        "conventions": [],
        "agent_name": None,
        "user_input": "",
        "final_output": "",
        "steps": [],
        "scores": {},
    }


def test_every_captured_fixture_reads_as_the_same_weather_run():
    names = sorted(FIXTURE_CONVENTIONS)
    result = inspect("--json", *(SPANS_DIR / f"{name}.jsonl" for name in names))
    assert (result.returncode, result.stderr) == (0, "")
    records = json_records(result)
    assert [r["trace_id"] for r in records] == [trace_id_of(SPANS_DIR / f"{name}.jsonl") for name in names]
    for name, record in zip(names, records):
        assert record["conventions"] == FIXTURE_CONVENTIONS[name], name
        assert (record["scored"], record["recognized"], record["kind"]) == (True, True, "trace")
        assert (record["user_input"], record["final_output"]) == (QUESTION, FINAL_ANSWER)
        assert (record["agent_name"], record["session_id"]) == (AGENT_NAME, SESSION_ID)
        assert [s["kind"] for s in record["steps"]] == ["llm", "tool", "llm"]
        assert record["steps"][1] == {
            "kind": "tool",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
            "result": WEATHER_REPORT,
            "error": None,
        }


def test_a_fixture_in_the_human_format():
    result = inspect(SPANS_DIR / "openinference.jsonl")
    trace_id = trace_id_of(SPANS_DIR / "openinference.jsonl")
    assert result.returncode == 0
    assert result.stdout.splitlines()[:9] == [
        f"trace {trace_id} root='weather_agent' spans=4 service=weather-agent-openinference",
        "  conventions: openinference; scored: yes",
        "  session: weather-session-1  agent: weather_agent",
        '  user input:   "What\'s the weather in Paris?"',
        '  final output: "The weather in Paris is: Sunny, 22 C"',
        "  steps: 3",
        '    1. llm ChatCompletion  result="I will look up the current weather in Paris."',
        '    2. tool get_weather  arguments={"city": "Paris"}  result="Sunny, 22 C"',
        '    3. llm ChatCompletion  result="The weather in Paris is: Sunny, 22 C"',
    ]
    assert result.stdout.splitlines()[-1] == "1 trace in 1 file (OTLP/JSON); 1 would be scored"


def test_a_broken_line_is_reported_by_file_and_line_and_the_rest_is_still_read(tmp_path):
    first, second = bytes.fromhex("0a" * 16), bytes.fromhex("0b" * 16)
    bad_id = encode_request(request_of([span(bytes(16), "zero id")]))
    lines = write_lines(
        tmp_path / "scored.jsonl",
        agent_line(first, "one"),
        '{"resourceSpans": [',
        "",
        bad_id,
        agent_line(second, "two"),
    )
    result = inspect("--json", lines, tmp_path / "missing.jsonl")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"spanscore inspect: {lines}:2: invalid JSON: Expecting value: line 1 column 20 (char 19)",
        (
            f"spanscore inspect: {lines}:4: 1 span(s) rejected: span with invalid trace_id "
            "00000000000000000000000000000000: must be 16 bytes, not all zero"
        ),
        f"spanscore inspect: {tmp_path / 'missing.jsonl'}: cannot read: No such file or directory",
    ]
    assert [(r["trace_id"], r["root"]) for r in json_records(result)] == [(first.hex(), "one"), (second.hex(), "two")]


def test_a_file_of_one_broken_document_is_one_problem(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text(WEATHER.read_text(encoding="utf-8")[:300], encoding="utf-8")
    result = inspect(broken)
    assert result.returncode == 2
    assert result.stderr == f"spanscore inspect: {broken}: invalid JSON: Expecting value: line 21 column 1 (char 300)\n"
    assert result.stdout == ""  # nothing was read: no "0 traces in 1 file" under the problem


def test_spans_of_one_trace_are_grouped_across_lines_and_files_in_first_seen_order(tmp_path):
    late, early = bytes.fromhex("1" * 32), bytes.fromhex("2" * 32)
    root_id, child_id = bytes.fromhex("a1" * 8), bytes.fromhex("a2" * 8)
    one = write_lines(
        tmp_path / "one.jsonl",
        encode_request(request_of([span(early, "child", parent=root_id, span_id=child_id)])),
        encode_request(request_of([span(late, "other", attributes=AGENT_ROOT)])),
    )
    two = write_lines(
        tmp_path / "two.jsonl",
        encode_request(
            request_of([span(early, "invoke_agent", span_id=root_id, attributes={**AGENT_ROOT, "session.id": "s-3"})])
        ),
    )
    result = inspect("--json", one, two)
    assert result.returncode == 0
    records = json_records(result)
    assert [(r["trace_id"], r["root"], r["spans"], r["session_id"]) for r in records] == [
        (early.hex(), "invoke_agent", 2, "s-3"),
        (late.hex(), "other", 1, None),
    ]


def test_long_texts_are_shortened_with_their_length_in_the_human_format_only(tmp_path):
    question = ("Compare the weather in Paris and Lyon. " * 5).strip()  # 5 x 39 - 1 = 194 characters
    attributes = {
        **AGENT_ROOT,
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
    }
    path = write_lines(
        tmp_path / "long.jsonl", encode_request(request_of([span(bytes(15) + b"\x01", "ask", attributes=attributes)]))
    )
    human, as_json = inspect(path), inspect("--json", path)
    assert len(question) == 194
    assert f'  user input:   "{question[:80]}…" (194 chars)' in human.stdout.splitlines()
    assert json_records(as_json)[0]["user_input"] == question


def test_an_agent_trace_without_content_shows_what_is_missing(tmp_path):
    root = span(
        bytes(15) + b"\x02",
        "invoke_agent helper",
        span_id=bytes(7) + b"\x01",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
    )
    llm = span(
        root.trace_id,
        "chat gpt-4o",
        parent=root.span_id,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
    )
    path = write_lines(tmp_path / "bare.jsonl", encode_request(request_of([root, llm])))
    assert inspect(path).stdout.splitlines()[:6] == [
        "trace 00000000000000000000000000000002 root='invoke_agent helper' spans=2 service=agent",
        "  conventions: genai; scored: yes",
        "  session: (none)  agent: helper",
        "  user input:   (none)",
        "  final output: (none)",
        "  steps: 1",
    ]


def test_a_session_carrier_is_shown_as_such_with_its_scores(tmp_path):
    agent_trace = bytes.fromhex("c" * 32)
    session = Session("chat-9", request_of([]).resource_spans[0].resource, 0.0)
    session.traces.append(TraceSummary(agent_trace, bytes.fromhex("d" * 16), 0, True, {}))
    session.results.extend(
        [MetricResult(name="agent_reliability", score=0.25), MetricResult.failure("agent_consistency", "no signals")]
    )
    carrier = session_carrier(session, 1_000, 2_000, "1.0")
    path = write_lines(tmp_path / "carrier.jsonl", encode_request(ExportTraceServiceRequest(resource_spans=[carrier])))
    carrier_id = carrier.scope_spans[0].spans[0].trace_id.hex()
    human, as_json = inspect(path), inspect("--json", path)
    assert human.stdout.splitlines()[:3] == [
        f"trace {carrier_id} root='evaluate_session' spans=1 service=agent",
        "  spanscore session carrier, not an agent trace: session chat-9, 1 linked trace",
        "  scores on the span: agent_reliability=0.25 fail, agent_consistency error",
    ]
    assert json_records(as_json) == [
        {
            "trace_id": carrier_id,
            "kind": "session_carrier",
            "service": "agent",
            "root": "evaluate_session",
            "complete": True,
            "spans": 1,
            "session_id": "chat-9",
            "scored": False,
            "not_scored_because": "a spanscore evaluate_session carrier",
            "linked_traces": [agent_trace.hex()],
            "scores": {
                "agent_reliability": {"score": 0.25, "label": "fail"},
                "agent_consistency": {"error": "no signals"},
            },
        }
    ]

    # Every key a record can have is one docs/cli.md lists.
    documented = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    agent_records = json_records(inspect("--json", WEATHER))
    keys = {key for record in [*json_records(as_json), *agent_records] for key in record}
    assert keys == {key for key in keys if f"`{key}`" in documented}, "keys of inspect --json not in docs/cli.md"


def test_config_gives_the_session_keys_and_the_scoring_scope(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        """
receivers: {otlp: {protocols: {grpc: {}}}}
processors:
  assembler:
    session_keys: [thread.id]
    score: {exclude: {services: [canary]}}
exporters: {debug: {}}
service: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}
""",
        encoding="utf-8",
    )
    attributes = {**AGENT_ROOT, "thread.id": "t-1", "session.id": "ignored"}
    path = write_lines(
        tmp_path / "two.jsonl",
        encode_request(request_of([span(bytes(15) + b"\x03", "a", attributes=attributes)])),
        encode_request(request_of([span(bytes(15) + b"\x04", "b", attributes=attributes)], service="canary")),
    )
    records = json_records(inspect("--json", "--config", config, path))
    assert [(r["session_id"], r["scored"], r["not_scored_because"]) for r in records] == [
        ("t-1", True, None),
        ("t-1", False, "matched by score.exclude"),
    ]


def test_an_invalid_config_is_reported_by_key_path(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "processors: {assembler: {score: {include: {match_type: regexp, services: ['(']}}}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}\n"
        "receivers: {otlp: {protocols: {grpc: {}}}}\nexporters: {debug: {}}\n",
        encoding="utf-8",
    )
    result = inspect("--config", config, WEATHER)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"spanscore inspect: {config} is invalid:",
        (
            "  processors.assembler.score.include.services[0]: invalid regular expression: missing ), unterminated "
            "subpattern at position 0 (got '(')"
        ),
    ]


@pytest.mark.parametrize("arguments", [(), ("--json",)])
def test_no_file_is_a_usage_error(arguments):
    result = inspect(*arguments)
    assert result.returncode == 2 and "the following arguments are required: FILE" in result.stderr


def test_a_clients_names_and_ids_are_escaped_and_bounded_in_the_human_format(tmp_path):
    """A span name, session id or agent name is the client's text: it must not start a line
    of its own, steer the terminal, or fill the screen."""
    forged = "x\n2026-01-01 ERROR spanscore: forged\x1b[31m"
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": forged,
        "gen_ai.conversation.id": forged,
        "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]',
    }
    root = span(bytes.fromhex("e" * 32), "n" * 1_000_000 + forged, attributes=attributes)
    path = write_lines(tmp_path / "hostile.jsonl", encode_request(request_of([root])))
    printed = inspect(path).stdout
    assert "\x1b" not in printed
    assert not any(line.startswith("2026-01-01") for line in printed.splitlines())
    assert max(map(len, printed.splitlines())) < 1_000
    assert "agent: x\\n2026-01-01 ERROR spanscore: forged\\x1b[31m" in printed


RAG_DIR = SPANS_DIR / "rag"


def test_each_convention_s_rag_trace_shows_its_retrieval_with_its_documents():
    for path in sorted(RAG_DIR.glob("*.jsonl")):
        lines = inspect(path).stdout.splitlines()
        [step] = [line for line in lines if line.startswith("    1. retrieval ")]
        assert step.endswith("  2 documents"), path.name
        assert any(line.startswith("       [1] policy-returns") and "within 30 days" in line for line in lines), (
            path.name
        )
        assert any(line.startswith("    2. llm ") for line in lines), path.name


def test_a_retrieval_of_many_long_documents_shows_the_first_three_cut_with_counts(tmp_path):
    attributes = {"openinference.span.kind": "RETRIEVER", "input.value": "refund window"}
    for i in range(1_000):
        attributes[f"retrieval.documents.{i}.document.id"] = f"doc-{i}"
        attributes[f"retrieval.documents.{i}.document.content"] = f"{i} " + "y" * 2_000
    trace_id = bytes(15) + b"\x07"
    root = span(trace_id, "rag", attributes=AGENT_ROOT, span_id=b"\x00" * 7 + b"\x01")
    retriever = span(trace_id, "retrieve", parent=root.span_id, attributes=attributes)
    path = write_lines(tmp_path / "many.jsonl", encode_request(request_of([root, retriever])))
    human = inspect(path).stdout.splitlines()
    assert '    1. retrieval retrieve  query="refund window"  1,000 documents' in human
    shown = [line for line in human if line.startswith("       [")]
    assert [line.split()[1] for line in shown] == ["doc-0", "doc-1", "doc-2"]
    assert shown[0].endswith('…" (2002 chars)') and len(shown[0]) < 130
    assert "       … 997 more documents" in human

    [record] = json_records(inspect("--json", path))
    [step] = record["steps"]
    assert (step["kind"], step["query"], step["document_count"]) == ("retrieval", "refund window", 1_000)
    assert [(d["id"], len(d["content"]), d["content_chars"]) for d in step["documents"]] == [
        (f"doc-{i}", 500, 2_000 + len(f"{i} ")) for i in range(3)
    ]


def test_steps_of_a_trace_without_retrieval_have_only_the_keys_they_had():
    [record] = json_records(inspect("--json", SPANS_DIR / "openinference.jsonl"))
    assert {tuple(step) for step in record["steps"]} == {("kind", "name", "arguments", "result", "error")}


def test_span_level_scores_are_shown_under_their_steps_and_the_roll_up_with_the_root(tmp_path):
    trace, ids = scored_run()
    origin = next(iter(trace.spans_by_origin))
    request = ExportTraceServiceRequest(resource_spans=[origin.resource_spans])
    scored = write_lines(tmp_path / "scored.jsonl", encode_request(request))

    text = inspect(scored)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("    1. llm chat plan"))
    assert lines[plan + 1] == "       scores on the span: span_ok=0.20 fail"
    answer = next(i for i, line in enumerate(lines) if line.startswith("    3. llm chat answer"))
    assert lines[answer + 1] == "       scores on the span: span_ok=1.00 pass"
    summary = next(i for i, line in enumerate(lines) if line.startswith("    4. llm chat summary"))
    assert lines[summary + 1] == "  scores on the span: span_ok=0.20 fail"  # none under it; the root's roll-up

    [record] = json_records(inspect("--json", scored))
    steps = record["steps"]
    assert [step["kind"] for step in steps] == ["llm", "tool", "llm", "llm"]
    assert steps[0]["scores"] == {"span_ok": {"score": 0.2, "label": "fail"}}
    assert steps[2]["scores"] == {"span_ok": {"score": 1.0, "label": "pass"}}
    assert "scores" not in steps[1] and "scores" not in steps[3]
    assert record["scores"]["span_ok"] == {"score": 0.2, "label": "fail"}
