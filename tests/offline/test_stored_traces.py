"""Traces as trace stores hand them out (Jaeger's JSON model, Jaeger api_v3, Tempo), read
by `inspect`, `score` and `agree` like OTLP/JSON; anything else refused by file:line.

The fixtures (tests/fixtures/stored_traces, see its README) follow each store's format.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
from pathlib import Path

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanscore.cli import main
from spanscore.core.attributes import any_value_to_python, attributes_to_dict
from spanscore.offline import inspect
from spanscore.offline.otlp_files import read_requests
from tests.support.agreement_files import write_labels
from tests.support.processes import ROOT, run_spanscore

STORED = ROOT / "tests" / "fixtures" / "stored_traces"
OSLO_RUN = ["llm", "tool", "llm"]  # the steps of the agent run every fixture holds

# fixture -> (format named in the summary, the agent trace's id, every trace id it holds)
FIXTURES = {
    "jaeger-ui-download.json": ("Jaeger JSON", "5c00e5c00e0000000000000000000003", 2),
    "jaeger-query-api.json": ("Jaeger JSON", "5c00e5c00e0000000000000000000003", 2),
    "jaeger-api-v3.json": ("Jaeger api_v3 JSON", "5c00e5c00e0000000000000000000004", 1),
    "tempo-batches.json": ("Tempo JSON", "5c00e5c00e0000000000000000000005", 1),
    "tempo-v2.json": ("Tempo JSON", "5c00e5c00e0000000000000000000006", 1),
}


def run_inspect(*paths: Path, as_json: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = inspect.run([str(p) for p in paths], as_json, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def gzipped(source: Path, target: Path) -> Path:
    target.write_bytes(gzip.compress(source.read_bytes()))
    return target


def one_line(source: Path) -> str:
    return json.dumps(json.loads(source.read_text(encoding="utf-8")), separators=(",", ":"))


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", FIXTURES)
def test_each_store_format_reads_as_the_agent_run_and_is_named_in_the_summary(name, packed, tmp_path):
    fmt, trace_id, traces = FIXTURES[name]
    path = gzipped(STORED / name, tmp_path / f"{name}.gz") if packed else STORED / name
    code, out, err = run_inspect(path, as_json=True)
    assert (code, err) == (0, "")
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == traces
    [agent] = [r for r in records if r["trace_id"] == trace_id]
    assert agent["scored"] and agent["complete"] and agent["spans"] == 4
    assert (agent["service"], agent["agent_name"], agent["session_id"]) == (
        "weather-agent",
        "weather-agent",
        "demo-session-3",
    )
    assert agent["user_input"] == "What's the weather in Oslo?"
    assert [step["kind"] for step in agent["steps"]] == OSLO_RUN
    assert agent["steps"][1]["error"] == "HTTPError: 503 Service Unavailable"
    code, out, _ = run_inspect(path)
    named = f"gzipped {fmt}" if packed else fmt
    assert out.splitlines()[-1] == f"{traces} trace{'s' if traces > 1 else ''} in 1 file ({named}); 1 would be scored"


def test_the_command_reads_every_format_at_once_and_names_each(tmp_path):
    packed = gzipped(STORED / "tempo-batches.json", tmp_path / "tempo.json.gz")
    paths = [ROOT / "examples" / "weather-agent.json", STORED / "jaeger-ui-download.json", packed]
    paths += [STORED / "jaeger-api-v3.json", STORED / "tempo-v2.json"]
    result = run_spanscore("inspect", *paths)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[-1] == (
        "7 traces in 5 files (OTLP/JSON, Jaeger JSON, gzipped Tempo JSON, Jaeger api_v3 JSON, Tempo JSON); "
        "6 would be scored"
    )


def test_json_lines_of_store_answers_are_read_line_by_line(tmp_path):
    # A script saving one api_v3 or Tempo answer per line, beside the file exporter's lines.
    lines = tmp_path / "answers.jsonl"
    lines.write_text(
        "\n".join([one_line(STORED / "jaeger-api-v3.json"), one_line(STORED / "tempo-batches.json")]) + "\n",
        encoding="utf-8",
    )
    code, out, err = run_inspect(lines)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "2 traces in 1 file (Jaeger api_v3 JSON, Tempo JSON); 2 would be scored"


# Each format with one thing wrong, as a line after a good line of the same format.
def _broken_jaeger(document: dict) -> dict:
    document["data"][0]["spans"][2]["spanID"] = "not-hex"
    return document


def _broken_v3(document: dict) -> dict:
    document["result"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "5c00e5c00e00zz"
    return document


def _broken_tempo(document: dict) -> dict:
    document["batches"][0]["scopeSpans"][0]["spans"][1]["parentSpanId"] = "pKSk!!"
    return document


def _broken_tempo_v2(document: dict) -> dict:
    document["trace"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "soon"
    return document


BROKEN = {
    "jaeger-ui-download.json": (
        _broken_jaeger,
        "not Jaeger's JSON model: data[0].spans[2].spanID: 'not-hex' is not hex",
    ),
    "jaeger-api-v3.json": (_broken_v3, "span 0: traceId '5c00e5c00e00zz' is not hex"),
    "tempo-batches.json": (_broken_tempo, "span 1: parentSpanId 'pKSk!!' is not hex"),
    "tempo-v2.json": (_broken_tempo_v2, "not an OTLP trace export request: "),
}


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("name", BROKEN)
def test_a_malformed_line_of_each_format_a_non_trace_object_and_broken_json_are_reported_by_line(
    name, packed, tmp_path
):
    breaking, message = BROKEN[name]
    good = one_line(STORED / name)
    bad = json.dumps(breaking(json.loads(good)))
    lines = tmp_path / "mixed.jsonl"
    lines.write_text("\n".join([good, bad, '{"foo": 1}', good[: len(good) // 2], good]) + "\n", encoding="utf-8")
    path = gzipped(lines, tmp_path / "mixed.jsonl.gz") if packed else lines
    code, out, err = run_inspect(path)
    assert code == 2
    problems = err.splitlines()
    assert len(problems) == 3
    assert problems[0].startswith(f"spanscore inspect: {path}:2: {message}")
    assert problems[1] == (
        f"spanscore inspect: {path}:3: not trace JSON: an object with keys {{'foo'}}, "
        "where OTLP/JSON has resourceSpans, Tempo batches, Jaeger api_v3 result and Jaeger's JSON data"
    )
    assert problems[2].startswith(f"spanscore inspect: {path}:4: invalid JSON: ")
    assert FIXTURES[name][1] in out  # the good lines are read all the same


@pytest.mark.parametrize("name", ["jaeger-query-api.json", "jaeger-api-v3.json"])
def test_a_malformed_pretty_printed_document_is_one_problem_naming_its_line(name, tmp_path):
    broken = tmp_path / name
    text = (STORED / name).read_text(encoding="utf-8")
    broken.write_text(text.replace('"spans": [', '"spans": [,', 1), encoding="utf-8")
    code, out, err = run_inspect(broken)
    assert code == 2
    assert err.startswith(f"spanscore inspect: {broken}: invalid JSON: Expecting value: line ")
    assert err.count("\n") == 1
    assert out == ""


@pytest.mark.parametrize(
    "document, message",
    [
        ({"foo": 1}, "not trace JSON: an object with keys {'foo'}"),
        ({}, "not trace JSON: an object with keys {}"),
        ({"a": 1, "b": 2, "c": 3, "d": 4}, "not trace JSON: an object with keys {'a', 'b', 'c', ...}"),
        ([1, 2], "expected a JSON object, got list"),
        ({"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}, "a Jaeger error answer, no traces: "),
        ({"error": {"httpCode": 404, "message": "trace not found"}}, "a Jaeger api_v3 error answer, no traces: "),
    ],
)
def test_json_that_is_not_traces_is_refused_by_file_and_line(document, message, tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    code, out, err = run_inspect(path)
    assert code == 2
    assert err.startswith(f"spanscore inspect: {path}:1: {message}")
    assert out == ""


def test_a_pretty_printed_object_that_is_not_traces_is_refused(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"foo": 1, "bar": [1, 2]}, indent=2), encoding="utf-8")
    code, _, err = run_inspect(path)
    assert code == 2
    assert err.startswith(f"spanscore inspect: {path}: not trace JSON: an object with keys {{'foo', 'bar'}}")


# The Jaeger model, field by field ----------------------------------------------------------


def _jaeger_spans():
    [first, second] = list(read_requests(STORED / "jaeger-query-api.json", problems := []))
    assert problems == []
    return first, second


def test_jaeger_trace_ids_parentage_links_and_times():
    (_, request), (_, health) = _jaeger_spans()
    spans = {s.span_id.hex(): s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert list(spans) == ["a3a3a3a3a3a3a3a3", "030000000000010a", "030000000000030a", "030000000000020a"]
    assert {s.trace_id.hex() for s in spans.values()} == {"5c00e5c00e0000000000000000000003"}
    root, chat, tool, answer = (
        spans[k] for k in ("a3a3a3a3a3a3a3a3", "030000000000010a", "030000000000020a", "030000000000030a")
    )
    assert root.parent_span_id == b""
    assert {s.parent_span_id.hex() for s in (chat, tool, answer)} == {"a3a3a3a3a3a3a3a3"}
    # The FOLLOWS_FROM reference is a link, as the collector's Jaeger translator makes it.
    [link] = answer.links
    assert (link.trace_id.hex(), link.span_id.hex()) == ("5c00e5c00e0000000000000000000003", "030000000000020a")
    assert attributes_to_dict(link.attributes) == {"opentracing.ref_type": "follows_from"}
    assert not chat.links
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (1763800070000000000, 1763800072400000000)
    assert (tool.start_time_unix_nano, tool.end_time_unix_nano) == (1763800070910000000, 1763800071200000000)
    # A 64-bit trace id (16 hex digits) is the low half of the 16 bytes.
    assert health.resource_spans[0].scope_spans[0].spans[0].trace_id.hex() == "00000000000000004bf92f3577b34da6"


def test_jaeger_kinds_and_status():
    (_, request), (_, health) = _jaeger_spans()
    spans = {s.span_id.hex(): s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    root, chat, tool = spans["a3a3a3a3a3a3a3a3"], spans["030000000000010a"], spans["030000000000020a"]
    assert (root.kind, chat.kind, tool.kind) == (
        Span.SPAN_KIND_INTERNAL,
        Span.SPAN_KIND_CLIENT,
        Span.SPAN_KIND_INTERNAL,
    )
    assert health.resource_spans[0].scope_spans[0].spans[0].kind == Span.SPAN_KIND_SERVER
    assert (root.status.code, root.status.message) == (Status.STATUS_CODE_OK, "")
    assert (tool.status.code, tool.status.message) == (
        Status.STATUS_CODE_ERROR,
        "upstream weather service: 503 Service Unavailable",
    )
    assert chat.status.code == Status.STATUS_CODE_UNSET
    # The tags that said kind and status are fields now, not attributes.
    for span in (root, chat, tool):
        assert not {"span.kind", "error", "otel.status_code", "otel.status_description"} & set(
            attributes_to_dict(span.attributes)
        )


def test_jaeger_attributes_keep_their_types():
    (_, request), _ = _jaeger_spans()
    spans = {s.span_id.hex(): s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    chat = {kv.key: kv.value for kv in spans["030000000000010a"].attributes}
    assert {key: value.WhichOneof("value") for key, value in chat.items()} == {
        "gen_ai.operation.name": "string_value",
        "gen_ai.request.model": "string_value",
        "gen_ai.request.temperature": "double_value",
        "gen_ai.request.stream": "bool_value",
        "gen_ai.usage.input_tokens": "int_value",
        "gen_ai.usage.output_tokens": "int_value",
        "internal.span.format": "string_value",
    }
    assert {key: any_value_to_python(value) for key, value in chat.items()} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.stream": False,
        "gen_ai.usage.input_tokens": 112,
        "gen_ai.usage.output_tokens": 18,
        "internal.span.format": "otlp",
    }
    tool = attributes_to_dict(spans["030000000000020a"].attributes)
    assert (
        tool["http.response.body"]
        == base64.b64decode("eyJlcnJvciI6ICJ1bmF2YWlsYWJsZSJ9")
        == b'{"error": "unavailable"}'
    )


def test_jaeger_logs_are_events_named_by_their_event_field():
    (_, request), _ = _jaeger_spans()
    spans = {s.span_id.hex(): s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    [choice] = spans["030000000000010a"].events
    assert (choice.name, choice.time_unix_nano) == ("gen_ai.choice", 1763800070890000000)
    assert attributes_to_dict(choice.attributes) == {"index": 0, "finish_reason": "tool_calls"}
    [exception] = spans["030000000000020a"].events
    assert exception.name == "exception"
    assert attributes_to_dict(exception.attributes) == {
        "exception.type": "HTTPError",
        "exception.message": "503 Service Unavailable",
        "exception.escaped": False,
    }
    assert not spans["a3a3a3a3a3a3a3a3"].events


def test_jaeger_processes_are_resources_and_scope_tags_the_scope():
    (_, request), (_, health) = _jaeger_spans()
    resources = [
        (
            attributes_to_dict(rs.resource.attributes),
            [(ss.scope.name, ss.scope.version, len(ss.spans)) for ss in rs.scope_spans],
        )
        for rs in request.resource_spans
    ]
    assert resources == [
        (
            {
                "service.name": "weather-agent",
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "opentelemetry",
                "host.cpu.count": 8,
            },
            [("weather-agent-sdk", "0.3.0", 3)],
        ),
        ({"service.name": "weather-tools", "service.version": "1.4.2"}, [("weather-tools", "", 1)]),
    ]
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                assert not {"otel.scope.name", "otel.scope.version"} & set(attributes_to_dict(span.attributes))
    assert attributes_to_dict(health.resource_spans[0].resource.attributes) == {"service.name": "weather-tools"}


def test_jaeger_short_ids_embedded_processes_and_untyped_values(tmp_path):
    # Jaeger's own fixtures drop leading zeros; older writers embed the process in the span
    # and quote 64-bit numbers.
    trace = {
        "traceID": "abc0",
        "spans": [
            {
                "traceID": "abc0",
                "spanID": "abc0",
                "operationName": "root",
                "startTime": 1000,
                "duration": 500,
                "process": {"serviceName": "one", "tags": []},
                "tags": [{"key": "big", "type": "int64", "value": "9007199254740993"}],
            },
            {
                "traceID": "abc0",
                "spanID": "123",
                "operationName": "child",
                "startTime": 1100,
                "duration": 100,
                "references": [{"refType": "CHILD_OF", "traceID": "abc0", "spanID": "abc0"}],
                "process": {"serviceName": "one", "tags": []},
                "tags": [{"key": "ratio", "value": 0.5}, {"key": "ok", "value": True}],
            },
        ],
    }
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    [(where, request)] = list(read_requests(path, problems := [], formats=(formats := [])))
    assert (problems, formats, where) == ([], ["Jaeger JSON"], f"{path}:1")
    [resource_spans] = request.resource_spans  # one resource for the spans of one process
    root, child = resource_spans.scope_spans[0].spans
    assert (root.trace_id.hex(), root.span_id.hex()) == ("0" * 28 + "abc0", "000000000000abc0")
    assert (child.span_id.hex(), child.parent_span_id.hex()) == ("0000000000000123", "000000000000abc0")
    assert attributes_to_dict(root.attributes) == {"big": 9007199254740993}
    assert attributes_to_dict(child.attributes) == {"ratio": 0.5, "ok": True}


# score and agree -----------------------------------------------------------------------------

CONFIG = """
processors:
  assembler: {trace_wait: 100ms}
  embedding_metrics: {embedder: {type: hashing}}
  session_metrics: {}
exporters: {file: {path: unused.jsonl}}
receivers: {otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}
service:
  pipelines:
    traces: {receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [file]}
"""


def test_score_of_a_jaeger_export_writes_otlp_json_that_inspect_reads_back(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    scored = tmp_path / "scored.jsonl"
    result = run_spanscore("score", STORED / "jaeger-ui-download.json", "-o", scored, "--config", config, timeout=120)
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("Jaeger JSON: 5 spans in 2 requests -> ") for line in result.stderr.splitlines())
    code, out, err = run_inspect(scored, as_json=True)
    assert (code, err) == (0, "")
    records = {r["trace_id"]: r for r in map(json.loads, out.splitlines())}
    agent = records["5c00e5c00e0000000000000000000003"]
    assert [step["kind"] for step in agent["steps"]] == OSLO_RUN
    assert {"coherence", "loop_detection"} <= set(agent["scores"])
    assert "00000000000000004bf92f3577b34da6" in records  # the plain trace, forwarded unscored
    code, out, _ = run_inspect(scored)
    assert "(OTLP/JSON)" in out.splitlines()[-1]


def test_agree_reports_a_line_of_a_scored_file_that_is_not_traces(tmp_path, capsys):
    scored = tmp_path / "scored.jsonl"
    scored.write_text('{"foo": 1}\n', encoding="utf-8")
    labels = write_labels(tmp_path / "labels.jsonl", [{"trace_id": "1" * 32, "metric": "coherence", "label": "pass"}])
    code = main(["agree", str(scored), "--labels", str(labels)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{scored}:1: not trace JSON: an object with keys {{'foo'}}" in err


def test_jaeger_values_that_cannot_be_read_are_short_problems(tmp_path):
    def export(tags, start=1000, duration=10):
        span = {"traceID": "abc0", "spanID": "abc0", "operationName": "op", "startTime": start, "duration": duration}
        return json.dumps({"data": [{"traceID": "abc0", "spans": [{**span, "tags": tags}], "processes": {}}]})

    deep = json.loads("[" * 500 + "]" * 500)
    lines = [
        export([{"key": "k", "type": "string", "value": deep}]),
        export([{"key": "n", "type": "int64", "value": "9" * 1_000_000}]),
        export([], start=2**64 - 1),
        export([{"key": "b", "type": "binary", "value": "not base64!"}]),
        export([{"key": "t", "type": "decimal", "value": "1.5"}]),
        export([], start=2**63 // 1000 - 1, duration=2**63 // 1000 - 1),  # the largest times: read
    ]
    path = tmp_path / "bad-values.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run_inspect(path)
    assert code == 2
    prefix = f"spanscore inspect: {path}"
    assert err.splitlines() == [
        f"{prefix}:1: not Jaeger's JSON model: data[0].spans[0].tags[0] (k): a list is not a 'string' value",
        f"{prefix}:2: not Jaeger's JSON model: data[0].spans[0].tags[0] (n): '{'9' * 60}…' (1,000,000 characters) "
        "is not a 'int64' value",
        f"{prefix}:3: not Jaeger's JSON model: data[0].spans[0].startTime: 18446744073709551615 is not a time in "
        "microseconds",
        f"{prefix}:4: not Jaeger's JSON model: data[0].spans[0].tags[0] (b): binary value is not base64",
        f"{prefix}:5: not Jaeger's JSON model: data[0].spans[0].tags[0] (t): '1.5' is not a 'decimal' value",
    ]
    assert out.splitlines()[-1] == "1 trace in 1 file (Jaeger JSON); 0 would be scored"
