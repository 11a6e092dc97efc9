"""`spanscore score`: recorded files through the scoring pipeline, offline, as the
collector would have scored them live."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

from spanscore.config.loader import parse_config
from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import encode_request
from spanscore.offline.score_files import score_files
from tests.support.factories import TEST_FACTORIES
from tests.support.failing_run import run_spans
from tests.support.otlp_json import read_requests
from tests.support.processes import ROOT, post_otlp_json, run_spanscore
from tests.support.running import wait_until
from tests.support.spans import evaluation_events, request_of

WEATHER = ROOT / "examples" / "weather-agent.json"  # one request, a two-trace session
FRAMEWORKS = sorted((ROOT / "tests" / "fixtures" / "spans" / "frameworks").glob("*.jsonl"))

METRICS = """
processors:
  assembler: {{trace_wait: 100ms{extra}}}
  embedding_metrics: {{embedder: {{type: hashing}}}}
  session_metrics: {{}}
"""


def config_yaml(receivers: str, exporters: str, extra: str = "") -> str:
    return f"""
receivers: {receivers}
{METRICS.format(extra=extra)}
exporters: {exporters}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [file]}}
"""


def offline_config(extra: str = "") -> str:
    return config_yaml("{otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}", "{file: {path: unused.jsonl}}", extra)


def scores(path: Path) -> dict[str, dict[str, object]]:
    """Per agent trace id (per session id for carriers): its eval.* attributes."""
    found = {}
    for request in read_requests(path):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = attributes_to_dict(span.attributes)
                    evals = {k: v for k, v in attributes.items() if k.startswith("eval.")}
                    if evals:
                        key = attributes.get("session.id") if span.name == "evaluate_session" else span.trace_id.hex()
                        found[f"{span.name}:{key}"] = evals
    return found


def score(*arguments: str | Path) -> subprocess.CompletedProcess:
    return run_spanscore("score", *arguments, timeout=120)


def test_offline_scores_equal_the_live_collectors(tmp_path, start_collector):
    live_out = tmp_path / "live.jsonl"
    collector = start_collector(
        config_yaml("{otlp: {protocols: {http: {endpoint: 127.0.0.1:0}}}}", f"{{file: {{path: {live_out}}}}}")
    )
    post_otlp_json(collector.http_port, WEATHER.read_bytes())
    assert wait_until(lambda: live_out.exists() and len(live_out.read_text().splitlines()) >= 1, timeout_s=10)
    collector.stop()  # closes the session: its carrier is written too

    offline_out = tmp_path / "offline.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    result = score(WEATHER, "-o", offline_out, "--config", config)
    assert result.returncode == 0, result.stderr
    live, offline = scores(live_out), scores(offline_out)
    assert len(live) == 3  # two traces and the session carrier
    assert offline == live


def test_every_framework_capture_is_scored_in_one_run(tmp_path):
    out = tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    result = score(*FRAMEWORKS, "-o", out, "--config", config)
    assert result.returncode == 0, result.stderr
    traces = {k for k in scores(out) if not k.startswith("evaluate_session")}
    agent_traces = sum(
        len(
            {s.trace_id for r in read_requests(p) for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans}
        )
        for p in FRAMEWORKS
    )
    # Not agent traces: AutoGen's lone create_agent, LlamaIndex's embedding of its index,
    # and the vector-store writes of the RAG apps (a Qdrant upsert, two Chroma adds).
    assert len(traces) == agent_traces - 5
    assert "5 not agent traces, forwarded unscored" in result.stderr
    assert "coherence" in result.stderr and "loop_detection" in result.stderr  # the summary table


def test_a_broken_line_is_reported_and_the_rest_is_scored(tmp_path):
    lines = (ROOT / "tests" / "fixtures" / "spans" / "frameworks" / "pydantic_ai.jsonl").read_text().splitlines()
    source = tmp_path / "recorded.jsonl"
    source.write_text("\n".join(["{not json", *lines]) + "\n")
    out = tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    result = score(source, "-o", out, "--config", config)
    assert result.returncode == 2
    assert f"{source}:1:" in result.stderr
    assert len([k for k in scores(out) if k.startswith("invoke_agent")]) == 2


def test_gzip_input_reads_as_the_plain_file(tmp_path):
    plain = ROOT / "tests" / "fixtures" / "spans" / "frameworks" / "strands.jsonl"
    packed = tmp_path / "strands.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    assert score(plain, "-o", tmp_path / "a.jsonl", "--config", config).returncode == 0
    assert score(packed, "-o", tmp_path / "b.jsonl", "--config", config).returncode == 0
    assert scores(tmp_path / "a.jsonl") == scores(tmp_path / "b.jsonl") != {}


async def test_reading_waits_for_scoring_at_the_span_bound(tmp_path):
    # 13 captures hold far more than 20 spans: reading must pause, not fail or drop.
    config = parse_config(offline_config(", max_buffered_spans: 20"), factories=TEST_FACTORIES)
    out = tmp_path / "scored.jsonl"
    summary = await score_files(FRAMEWORKS, config, out)
    written = sum(len(ss.spans) for r in read_requests(out) for rs in r.resource_spans for ss in rs.scope_spans)
    carriers = sum(1 for k in scores(out) if k.startswith("evaluate_session"))
    assert summary.problems == []
    assert written == summary.spans + carriers


def test_a_scored_file_scores_the_same_again(tmp_path):
    # The scored output can be scored again: the second pass changes no score.
    out1, out2 = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    assert score(WEATHER, "-o", out1, "--config", config).returncode == 0
    assert score(out1, "-o", out2, "--config", config).returncode == 0
    first = {k: v for k, v in scores(out1).items() if not k.startswith("evaluate_session")}
    second = {k: v for k, v in scores(out2).items() if not k.startswith("evaluate_session")}
    assert first == second


def written_spans(path: Path) -> list:
    return [s for r in read_requests(path) for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


def results_of(span) -> dict[str, list[dict]]:
    """Per metric, the span's evaluation events' attributes."""
    found: dict[str, list[dict]] = {}
    for attributes in evaluation_events(span):
        found.setdefault(attributes["gen_ai.evaluation.name"], []).append(attributes)
    return found


def assert_one_result_per_metric(span, kept: str = "") -> None:
    """One event per metric, carrying the provenance its attributes say (but metric
    `kept`, which came in the file as it is), keys unique."""
    keys = [a.key for a in span.attributes]
    assert len(keys) == len(set(keys)), span.name
    attributes = attributes_to_dict(span.attributes)
    for metric, events in results_of(span).items():
        assert len(events) == 1, (span.name, metric, events)
        if metric == kept:
            continue
        assert events[0]["eval.evaluator"] == attributes[f"eval.{metric}.evaluator"]
        assert events[0]["eval.revision"] == attributes[f"eval.{metric}.revision"]


def test_a_scored_file_scored_again_has_one_result_per_metric(tmp_path):
    out1, out2 = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    assert score(WEATHER, "-o", out1, "--config", config).returncode == 0
    result = score(out1, "-o", out2, "--config", config)
    assert result.returncode == 0, result.stderr
    first, second = written_spans(out1), written_spans(out2)
    assert len(second) == len(first)  # one session carrier still: the new one replaced the old
    assert [s.name for s in second].count("evaluate_session") == 1
    scored = [s for s in second if results_of(s)]
    assert len(scored) == 3  # two agent roots and the carrier
    for span in scored:
        assert_one_result_per_metric(span)
    by_id = {s.span_id: s for s in first}
    for span in second:
        if span.name != "evaluate_session":
            assert results_of(span).keys() == results_of(by_id[span.span_id]).keys()
    [old_carrier] = [s for s in first if s.name == "evaluate_session"]
    [carrier] = [s for s in second if s.name == "evaluate_session"]
    assert results_of(carrier).keys() == results_of(old_carrier).keys() == {"agent_consistency", "agent_reliability"}


def test_results_of_another_revision_are_replaced_by_the_new_ones(tmp_path):
    """A file scored by an older judge and rubric (its evaluator and revisions edited
    here), with a metric the new config does not score on each scored span."""
    out1, edited, out2 = tmp_path / "one.jsonl", tmp_path / "edited.jsonl", tmp_path / "two.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(offline_config())
    assert score(WEATHER, "-o", out1, "--config", config).returncode == 0
    lines = []
    for line in out1.read_text().splitlines():
        request = json.loads(line)
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    if not any(a["key"].endswith(".revision") for a in span.get("attributes", [])):
                        continue
                    for attribute in span["attributes"]:
                        if attribute["key"].endswith(".revision"):
                            attribute["value"] = {"stringValue": "000000000000"}
                        elif attribute["key"].endswith(".evaluator"):
                            attribute["value"] = {"stringValue": "old-judge"}
                        elif attribute["key"].endswith(".explanation"):
                            attribute["value"] = {"stringValue": "an old verdict"}
                    span["attributes"] += [
                        {"key": "eval.retired.evaluator", "value": {"stringValue": "old-judge"}},
                        {"key": "eval.retired.revision", "value": {"stringValue": "000000000000"}},
                        {"key": "eval.retired.score", "value": {"doubleValue": 0.5}},
                    ]
                    span["events"].append(
                        {
                            "name": "gen_ai.evaluation.result",
                            "timeUnixNano": "1",
                            "attributes": [{"key": "gen_ai.evaluation.name", "value": {"stringValue": "retired"}}],
                        }
                    )
        lines.append(json.dumps(request))
    edited.write_text("\n".join(lines) + "\n")
    result = score(edited, "-o", out2, "--config", config)
    assert result.returncode == 0, result.stderr

    fresh = {s.span_id: s for s in written_spans(out1)}
    second = written_spans(out2)
    scored = [s for s in second if results_of(s)]
    assert [s.name for s in scored].count("evaluate_session") == 1 and len(scored) == 3
    for span in scored:
        assert_one_result_per_metric(span, kept="retired")
        attributes = attributes_to_dict(span.attributes)
        # What the file came with for metrics not scored again stays, once.
        assert results_of(span)["retired"] == [{"gen_ai.evaluation.name": "retired"}]
        assert attributes["eval.retired.revision"] == "000000000000"
        rescored = {k: v for k, v in attributes.items() if k.startswith("eval.") and not k.startswith("eval.retired.")}
        assert "old-judge" not in rescored.values() and "000000000000" not in rescored.values()
        assert "an old verdict" not in rescored.values()
        if span.name != "evaluate_session":  # the new scores are the fresh file's
            expected = attributes_to_dict(fresh[span.span_id].attributes)
            assert rescored == {k: v for k, v in expected.items() if k.startswith("eval.")}


def test_findings_about_other_spans_are_replaced_too(tmp_path):
    _, failed, spans = run_spans(failing=True)
    recorded, out1, out2 = tmp_path / "run.jsonl", tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    recorded.write_text(encode_request(request_of(spans)) + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        offline_config()
        .replace("session_metrics: {}", "session_metrics: {}\n  failure_localization: {}")
        .replace("session_metrics]", "session_metrics, failure_localization]")
    )
    assert score(recorded, "-o", out1, "--config", config).returncode == 0
    result = score(out1, "-o", out2, "--config", config)
    assert result.returncode == 0, result.stderr
    first, second = ({s.span_id: s for s in written_spans(path)} for path in (out1, out2))
    assert [len(results_of(spans[failed["http"]])["failure_localization"]) for spans in (first, second)] == [1, 1]
    [finding] = results_of(second[failed["http"]])["failure_localization"]
    root = attributes_to_dict(second[failed["root"]].attributes)
    assert (finding["eval.evaluator"], finding["eval.revision"]) == (
        root["eval.failure_localization.evaluator"],
        root["eval.failure_localization.revision"],
    )
    assert_one_result_per_metric(second[failed["root"]])
