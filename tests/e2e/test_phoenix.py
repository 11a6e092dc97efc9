"""Arize Phoenix as the backend: spans through `otlphttp`, scores as `phoenix` annotations.

A real Phoenix runs on loopback (tests/support/phoenix_server.py). An agent instrumented
with the OpenTelemetry SDK sends two turns of one session over OTLP/HTTP to spanscore,
which scores them with the hashing embedder's metrics and the judge metrics (the
loopback OpenAI server judging one answer 0.9 and the other 0.2) and forwards them to
Phoenix's `/v1/traces` as protobuf, while the `phoenix` exporter writes every result as
a span annotation and the session's results as session annotations. Read back through
Phoenix's REST and GraphQL APIs: the `eval.*` attributes arrived, a filter on the
coherence score finds only the low-scored turn, and the annotations carry the same
names, scores, labels and explanations with the right annotator kind. Also: a Phoenix
that is down or refuses the annotations costs the other exporters nothing; annotations
that reach Phoenix before their span are applied once it is stored; and the config and
session-annotation rules, which need no Phoenix.

The Phoenix tests are skipped when no Phoenix is found (see `phoenix_python`), unless
SPANSCORE_REQUIRE_PHOENIX=1 (as in CI, which installs it), where its absence fails.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.exporters import phoenix as phoenix_exporter
from spanscore.pipeline import score_attributes
from spanscore.pipeline.late_rescores import trace_carrier
from spanscore.pipeline.scoring import Scored, sequence_attributes
from spanscore.processors.embedding_metrics import COHERENCE, LOOP_DETECTION
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support import spans as test_spans
from tests.support.factories import TEST_FACTORIES
from tests.support.failing_run import run_spans
from tests.support.judge_answers import answer_for, schema_of
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.otlp_client import post
from tests.support.phoenix_server import REQUIRE_ENV, PhoenixServer, phoenix_python, wait_for
from tests.support.ports import free_port
from tests.support.running import wait_until
from tests.support.span_metric import agent_run, scored_run
from tests.support.spans import AGENT_ROOT, new_trace_id, request_of

SESSION = "phoenix-session-1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUESTION = "What is the weather in Paris today?"
GOOD_ANSWER = "The weather in Paris today is sunny and warm."  # hashing coherence 0.74, judged 0.9
BAD_ANSWER = "Bananas grow on large tropical plants."  # hashing coherence 0.01, judged 0.2
SECRET = "s3cret-phoenix-key"
FAST_RETRY = "retry_on_failure: {initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 2s}"


@pytest.fixture(scope="module")
def phoenix():
    python, reason = phoenix_python()
    if python is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires it")
        pytest.skip(reason)
    with PhoenixServer(python) as server:
        logging.getLogger(__name__).info("Phoenix started in %.1fs", server.started_in_s)
        yield server


def judge_by_answer(request: RecordedRequest) -> Reply:
    """The good answer gets 0.9 on every scale, any other 0.2."""
    _, schema = schema_of(request)
    score = 0.9 if GOOD_ANSWER in request.messages()[-1]["content"] else 0.2
    return Reply(content=json.dumps(answer_for(schema, score)), prompt_tokens=120, completion_tokens=30)


@pytest.fixture
def judge_server():
    with OpenAIServer(handler=judge_by_answer) as server:
        yield server


def collector_config(
    processors: dict[str, str], exporters: dict[str, str], assembler: str = "trace_wait: 100ms"
) -> str:
    """A config receiving OTLP/HTTP on an ephemeral port; sections given as flow YAML by id."""

    def section(components: dict[str, str]) -> str:
        return "".join(f"  {name}: {body}\n" for name, body in components.items())

    return f"""
receivers:
  otlp: {{protocols: {{http: {{endpoint: 127.0.0.1:0}}}}}}
processors:
  assembler: {{{assembler}}}
{section(processors)}exporters:
{section(exporters)}service:
  shutdown_timeout: 15s
  pipelines:
    traces:
      receivers: [otlp]
      processors: [{", ".join(["assembler", *processors])}]
      exporters: [{", ".join(exporters)}]
"""


def into_phoenix(phoenix, project: str, processors: dict[str, str], **settings) -> str:
    """A config scoring with `processors`, its spans to Phoenix's project `project` and its
    scores as Phoenix annotations."""
    exporters = {
        "otlphttp": f"{{endpoint: '{phoenix.url}', headers: {{x-project-name: {project}}}, {FAST_RETRY}}}",
        "phoenix": f"{{endpoint: '{phoenix.url}', {FAST_RETRY}}}",
    }
    return collector_config(processors=processors, exporters=exporters, **settings)


def messages(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def run_agent(collector, answers: list[str], also: SpanExporter | None = None) -> list[tuple[str, str]]:
    """One turn per answer through the SDK's OTLP/HTTP exporter (and to `also`); (trace id,
    root span id) each."""
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-agent"}))
    if also is not None:
        provider.add_span_processor(SimpleSpanProcessor(also))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces", timeout=5))
    )
    tracer = provider.get_tracer("weather.agent", "0.1")
    turns = []
    for answer in answers:
        with tracer.start_as_current_span(
            "invoke_agent weather",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "weather",
                "session.id": SESSION,
                "gen_ai.input.messages": messages("user", QUESTION),
                "gen_ai.output.messages": messages("assistant", answer),
            },
        ) as root:
            tracer.start_span(
                "chat gpt-4o", attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
            ).end()
        context = root.get_span_context()
        turns.append((format(context.trace_id, "032x"), format(context.span_id, "016x")))
    provider.shutdown()
    return turns


def results_on(attributes: dict) -> dict[str, dict]:
    """The `eval.<metric>.*` results of a span's attributes, by metric (not judge usage)."""
    metrics: dict[str, dict] = {}
    for key, value in attributes.items():
        parts = key.split(".")
        if (
            len(parts) == 3
            and parts[0] == "eval"
            and parts[2] in ("score", "label", "explanation", "error", "evaluator", "revision")
        ):
            metrics.setdefault(parts[1], {})[parts[2]] = value
    return {name: fields for name, fields in metrics.items() if "score" in fields or "error" in fields}


def assert_annotations_match(annotations: list[dict], results: dict[str, dict]) -> None:
    assert sorted(a["name"] for a in annotations) == sorted(results)
    for annotation in annotations:
        fields = results[annotation["name"]]
        kind = "LLM" if annotation["name"] in METRIC_NAMES else "CODE"
        assert annotation["annotator_kind"] == kind, annotation
        assert annotation["identifier"] == "spanscore" and annotation["source"] == "API"
        assert annotation["metadata"]["evaluator"] == fields["evaluator"]
        assert annotation["metadata"]["revision"] == fields["revision"]
        if "error" in fields:
            assert annotation["result"] == {"label": "error", "score": None, "explanation": fields["error"]}
        else:
            assert annotation["result"]["score"] == pytest.approx(fields["score"])
            assert annotation["result"]["label"] == fields["label"]
            assert annotation["result"]["explanation"] == fields.get("explanation")


def test_scores_arrive_as_attributes_and_annotations_and_are_searchable(
    phoenix, judge_server, loop_thread, start_collector, caplog
):
    project = "spanscore-e2e"
    collector = start_collector(
        collector_config(
            processors={
                "embedding_metrics": "{embedder: {type: hashing}}",
                "judge_metrics": f"{{mode: combined, judge: {{model: judge-test, base_url: '{judge_server.base_url}', "
                "api_key: k}}",
                "session_metrics": "{}",
            },
            exporters={
                "otlphttp": f"{{endpoint: '{phoenix.url}', headers: {{x-project-name: {project}}}, {FAST_RETRY}}}",
                "phoenix": (
                    f"{{endpoint: '{phoenix.url}', headers: {{authorization: 'Bearer {SECRET}'}}, {FAST_RETRY}}}"
                ),
            },
        )
    )
    (_, good_span), (bad_trace, bad_span) = run_agent(collector, [GOOD_ANSWER, BAD_ANSWER])
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 2, timeout_s=15)
    collector.stop()  # closes the session: its evaluate_session carrier is scored and exported

    roots = wait_for(lambda: phoenix.spans(project, parent_id="null"), lambda spans: len(spans) == 3, timeout_s=20)
    by_name = {}
    for span in roots:
        by_name.setdefault(span["name"], []).append(span)
    assert sorted(by_name) == ["evaluate_session", "invoke_agent weather"], roots
    [carrier] = by_name["evaluate_session"]
    agent_roots = {span["context"]["span_id"]: span["attributes"] for span in by_name["invoke_agent weather"]}
    assert set(agent_roots) == {good_span, bad_span}

    # The scores are span attributes in Phoenix, as sent.
    good, bad = results_on(agent_roots[good_span]), results_on(agent_roots[bad_span])
    assert {COHERENCE, LOOP_DETECTION, "task_completion"} <= set(good) & set(bad)
    assert good[COHERENCE]["label"] == "pass" and bad[COHERENCE]["label"] == "fail"
    assert good["task_completion"]["score"] == 0.9 and bad["task_completion"]["score"] == 0.2
    assert bad[COHERENCE]["score"] < 0.5 <= good[COHERENCE]["score"]

    # ... and searchable: the trace filter (REST) and the span filter (GraphQL) find only
    # the low-scored turn. The trace filter names the wire key; the span filter reads the
    # attributes as Phoenix nests them by their dots.
    low_traces = phoenix.get(f"/v1/projects/{project}/traces", filter='attributes["eval.coherence.score"] < 0.5')
    assert [t["trace_id"] for t in low_traces["data"]] == [bad_trace]
    assert phoenix.span_filter(project, "attributes['eval']['coherence']['score'] < 0.5") == [bad_span]
    assert phoenix.span_filter(project, "eval.task_completion.label == 'fail'") == [bad_span]

    # Every result is a span annotation on the root span, with what the attributes say.
    expected = len(good) + len(bad)
    annotations = wait_for(
        lambda: phoenix.span_annotations(project, [good_span, bad_span]),
        lambda found: len(found) >= expected,
        timeout_s=30,
    )
    assert_annotations_match([a for a in annotations if a["span_id"] == good_span], good)
    assert_annotations_match([a for a in annotations if a["span_id"] == bad_span], bad)
    assert phoenix.span_filter(project, "annotations['coherence'].score < 0.5") == [bad_span]
    assert phoenix.span_filter(project, "annotations['task_completion'].label == 'fail'") == [bad_span]
    low_annotated = phoenix.get(
        f"/v1/projects/{project}/traces",
        filter=("any(a.name == 'coherence' and a.score < 0.5 for a in span_annotations)"),
    )
    assert [t["trace_id"] for t in low_annotated["data"]] == [bad_trace]

    # The session's results are session annotations, not annotations of the carrier span.
    session_results = results_on(carrier["attributes"])
    assert set(session_results) == {"agent_reliability", "agent_consistency"}
    sessions = wait_for(
        lambda: phoenix.get(f"/v1/projects/{project}/session_annotations", session_ids=[SESSION], limit=100)["data"],
        lambda found: len(found) >= len(session_results),
        timeout_s=30,
    )
    assert {a["session_id"] for a in sessions} == {SESSION}
    assert_annotations_match(sessions, session_results)
    reliability = session_results["agent_reliability"]["score"]
    found = phoenix.get(
        f"/v1/projects/{project}/sessions",
        filter=f"session_annotations['agent_reliability'].score < {reliability + 0.01}",
    )
    assert [s["session_id"] for s in found["data"]] == [SESSION]
    assert (
        phoenix.get(
            f"/v1/projects/{project}/sessions",
            filter=f"session_annotations['agent_reliability'].score > {reliability + 0.01}",
        )["data"]
        == []
    )
    assert phoenix.span_annotations(project, [carrier["context"]["span_id"]]) == []

    exporter = next(e for e in collector.service.exporters if e.id == "phoenix")
    assert exporter.dropped_spans == 0 and exporter.sent_spans == 5  # 2 traces of 2 spans, 1 carrier
    assert SECRET not in caplog.text


def test_an_unreachable_or_refusing_phoenix_loses_no_span_for_the_other_exporters(
    phoenix, loop_thread, start_collector, caplog
):
    caplog.set_level(logging.INFO)
    project = "spanscore-e2e-failures"
    authorization = f"headers: {{authorization: 'Bearer {SECRET}'}}, {FAST_RETRY}"
    collector = start_collector(
        collector_config(
            processors={"embedding_metrics": "{embedder: {type: hashing}}"},
            exporters={  # the failing ones first: they must not hold back the one that works
                "phoenix/down": f"{{endpoint: 'http://127.0.0.1:{free_port()}', {authorization}}}",
                "phoenix/refusing": f"{{endpoint: '{phoenix.url}/no-such-prefix', {authorization}}}",
                "otlphttp": f"{{endpoint: '{phoenix.url}', headers: {{x-project-name: {project}}}, {FAST_RETRY}}}",
            },
        )
    )
    [(trace_id, span_id)] = run_agent(collector, [GOOD_ANSWER])
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 1, timeout_s=15)
    exporters = {e.id: e for e in collector.service.exporters}
    assert exporters["otlphttp"].sent_spans == 2 and exporters["otlphttp"].dropped_spans == 0
    assert exporters["phoenix/down"].dropped_spans == 2 and exporters["phoenix/refusing"].dropped_spans == 2

    spans = wait_for(lambda: phoenix.spans(project, trace_id=[trace_id]), lambda found: len(found) == 2, timeout_s=20)
    [root] = [s for s in spans if s["context"]["span_id"] == span_id]
    assert root["attributes"]["eval.coherence.label"] == "pass"  # scored, forwarded, not annotated
    assert phoenix.span_annotations(project, [span_id]) == []

    messages = [r.getMessage() for r in caplog.records if r.name.startswith("spanscore.exporters")]
    down = [m for m in messages if "exporter phoenix/down" in m]
    assert any("retrying" in m for m in down) and any("dropping 2 spans" in m for m in down), down
    refusing = [m for m in messages if "exporter phoenix/refusing" in m]
    # Phoenix answers 405 Method Not Allowed there: a 4xx, given up on at once.
    assert len(refusing) == 1 and "HTTP 405" in refusing[0] and "(not retryable)" in refusing[0], refusing
    assert SECRET not in caplog.text


def test_an_annotation_that_arrives_before_its_span_is_applied_once_the_span_is_stored(
    phoenix, loop_thread, start_collector
):
    """The order the `otlphttp` and `phoenix` exporters reach Phoenix in is not fixed:
    here the annotations certainly come first, the spans seconds later."""
    project = "spanscore-e2e-late-spans"
    collector = start_collector(
        collector_config(
            processors={"embedding_metrics": "{embedder: {type: hashing}}"},
            exporters={"phoenix": f"{{endpoint: '{phoenix.url}', {FAST_RETRY}}}"},
        )
    )
    recorded = InMemorySpanExporter()
    [(_, span_id)] = run_agent(collector, [BAD_ANSWER], also=recorded)
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 1, timeout_s=15)
    [exporter] = collector.service.exporters
    assert exporter.sent_spans == 2 and exporter.dropped_spans == 0  # accepted for a span Phoenix lacks
    time.sleep(1.0)
    sent = OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces", headers={"x-project-name": project}, timeout=5)
    assert sent.export(recorded.get_finished_spans()) == SpanExportResult.SUCCESS
    sent.shutdown()
    assert wait_for(lambda: phoenix.spans(project), lambda spans: len(spans) == 2, timeout_s=20)
    # Phoenix retries a held annotation every 10 s.
    annotations = wait_for(
        lambda: phoenix.span_annotations(project, [span_id]), lambda found: len(found) == 2, timeout_s=30
    )
    by_name = {a["name"]: a for a in annotations}
    assert set(by_name) == {COHERENCE, LOOP_DETECTION}
    assert by_name[COHERENCE]["result"]["label"] == "fail" and by_name[COHERENCE]["result"]["score"] < 0.5


def test_a_phoenix_exporter_without_endpoint_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        parse_config(collector_config({}, {"phoenix": "{annotate_sessions: false}"}), factories=TEST_FACTORIES)
    assert error.value.problems == ["exporters.phoenix.endpoint: Field required"]
    with pytest.raises(ConfigError) as error:
        parse_config(collector_config({}, {"phoenix": "{endpoint: 'ftp://phoenix:6006'}"}), factories=TEST_FACTORIES)
    assert error.value.problems == [
        "exporters.phoenix: endpoint: 'ftp://phoenix:6006' must be an http:// or https:// URL"
    ]
    with pytest.raises(ConfigError) as error:  # and the key is not repeated in the message
        parse_config(
            collector_config({}, {"phoenix": f"{{endpoint: 'https://me:{SECRET}@phoenix'}}"}), factories=TEST_FACTORIES
        )
    assert error.value.problems == [
        "exporters.phoenix: endpoint: credentials go in headers (e.g. authorization), not in the URL"
    ]


def carrier_of(session_id: str, results: list[MetricResult]) -> Trace:
    """An `evaluate_session` carrier trace as the pipeline exports it."""
    session = Session(session_id, request_of([]).resource_spans[0].resource, 0.0, results=results)
    resource_spans = score_attributes.session_carrier(session, 1_000, 2_000, "1.0")
    scope_spans = resource_spans.scope_spans[0]
    span = scope_spans.spans[0]
    trace = Trace(span.trace_id, 0.0)
    trace.session_id, trace.results = session_id, results
    trace.add(0, span, ScopeOrigin(resource_spans, scope_spans))
    return trace


@pytest.mark.parametrize("annotate_sessions", [True, False])
def test_session_results_annotate_the_session_or_else_the_carrier_span(annotate_sessions):
    results = [
        MetricResult(name="agent_reliability", score=0.25, explanation="risky"),
        MetricResult.failure("agent_consistency", "No confidence signal"),
    ]
    carrier = carrier_of("s-7", results)
    config = phoenix_exporter.PhoenixExporterConfig(
        endpoint="http://127.0.0.1:6006/", annotate_sessions=annotate_sessions
    )
    spans, sessions = phoenix_exporter.PhoenixExporter("phoenix", config).annotations([carrier])
    expected = [
        {
            "name": "agent_reliability",
            "annotator_kind": "CODE",
            "identifier": "spanscore",
            "result": {"label": "fail", "score": 0.25, "explanation": "risky"},
            "metadata": {"threshold": 0.5, "evaluator": "code", "revision": ANY},
        },  # the e2e test checks it
        {
            "name": "agent_consistency",
            "annotator_kind": "CODE",
            "identifier": "spanscore",
            "result": {"label": "error", "score": None, "explanation": "No confidence signal"},
            "metadata": {"threshold": 0.5, "evaluator": "code", "error_type": "error", "revision": ANY},
        },
    ]
    if annotate_sessions:
        assert spans == [] and sessions == [{**a, "session_id": "s-7"} for a in expected]
    else:
        span_id = carrier.anchor.span_id.hex()
        assert sessions == [] and spans == [{**a, "span_id": span_id} for a in expected]
    assert config.base_url == "http://127.0.0.1:6006"


def test_the_metric_names_the_exporter_repeats_match_the_processors():
    # Exporters may not import processors, so these are copies; they must not drift.
    assert phoenix_exporter.JUDGE_METRICS == set(METRIC_NAMES)
    assert phoenix_exporter.EMBEDDING_METRICS == {COHERENCE, LOOP_DETECTION}


def test_a_blamed_span_is_annotated_in_phoenix_where_the_error_shows(phoenix, start_collector):
    # A run whose tool call got HTTP 429: failure_localization blames the HTTP span; the
    # phoenix exporter puts that finding on that span, the result on the root.
    project = "spanscore-blame"
    collector = start_collector(
        collector_config(
            processors={"failure_localization": "{}"},
            exporters={
                "otlphttp": f"{{endpoint: '{phoenix.url}', headers: {{x-project-name: {project}}}, {FAST_RETRY}}}",
                "phoenix": (
                    f"{{endpoint: '{phoenix.url}', headers: {{authorization: 'Bearer {SECRET}'}}, {FAST_RETRY}}}"
                ),
            },
        )
    )
    _, ids, spans = run_spans(failing=True)
    status, _, _ = post(collector.http_port, request_of(spans).SerializeToString(), "application/x-protobuf")
    assert status == 200
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 1, timeout_s=15)
    blamed, root = ids["http"].hex(), ids["root"].hex()
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) == 5, timeout_s=20)
    assert len(stored) == 5
    annotations = wait_for(
        lambda: phoenix.span_annotations(project, [blamed, root]), lambda found: len(found) >= 2, timeout_s=30
    )
    by_span = {a["span_id"]: a for a in annotations}
    assert by_span[blamed]["name"] == "failure_localization"
    assert by_span[blamed]["result"] == {"label": "rate_limiting", "score": None, "explanation": "GET failed: HTTP 429"}
    assert by_span[blamed]["metadata"] == {
        "group": "system_execution",
        "impact": "medium",
        "evidence": "HTTP 429",
        "source": "evidence",
    }
    assert (by_span[blamed]["annotator_kind"], by_span[blamed]["identifier"]) == ("CODE", "spanscore:rate_limiting")
    assert by_span[root]["result"]["label"] == "rate_limiting"  # the root's result, as every metric's
    found = phoenix.span_filter(project, "annotations['failure_localization'].label == 'rate_limiting'")
    assert sorted(found) == sorted([blamed, root])


def test_a_span_level_result_is_annotated_on_its_span_and_the_roll_up_on_the_root():
    trace, ids = scored_run()
    config = phoenix_exporter.PhoenixExporterConfig(endpoint="http://127.0.0.1:6006")
    spans, sessions = phoenix_exporter.PhoenixExporter("phoenix", config).annotations([trace])
    by_span = {(a["span_id"], a["name"]): a["result"] for a in spans}
    assert sessions == [] and len(spans) == 3
    assert by_span[(ids["plan"].hex(), "span_ok")] == {"label": "fail", "score": 0.2, "explanation": "span chat plan"}
    assert by_span[(ids["answer"].hex(), "span_ok")]["label"] == "pass"
    root = by_span[(ids["root"].hex(), "span_ok")]
    assert (root["label"], root["score"]) == ("fail", 0.2)


def test_span_level_results_are_annotated_in_phoenix_on_the_spans_they_name(phoenix, start_collector):
    project = "spanscore-span-targets"
    collector = start_collector(
        into_phoenix(phoenix, project, {"span_metric": "{on: llm, where: {span_names: [chat plan, chat answer]}}"})
    )
    _, ids, spans = agent_run()
    status, _, _ = post(collector.http_port, request_of(spans).SerializeToString(), "application/x-protobuf")
    assert status == 200
    assert wait_until(lambda: collector.pipeline.counts.exported_traces == 1, timeout_s=15)
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) == 5, timeout_s=20)
    assert len(stored) == 5
    wanted = [ids[name].hex() for name in ("root", "plan", "answer", "tool", "summary")]
    annotations = wait_for(
        lambda: phoenix.span_annotations(project, wanted), lambda found: len(found) >= 3, timeout_s=30
    )
    by_span = {a["span_id"]: a["result"] for a in annotations if a["name"] == "span_ok"}
    assert set(by_span) == {ids["root"].hex(), ids["plan"].hex(), ids["answer"].hex()}  # none on tool, summary
    assert (by_span[ids["plan"].hex()]["label"], by_span[ids["plan"].hex()]["score"]) == ("fail", 0.2)
    assert by_span[ids["answer"].hex()]["label"] == "pass"
    assert by_span[ids["root"].hex()]["label"] == "fail"  # the roll-up: a span failed
    found = phoenix.span_filter(project, "annotations['span_ok'].label == 'fail'")
    assert sorted(found) == sorted([ids["root"].hex(), ids["plan"].hex()])


def test_a_rescore_carrier_annotates_the_root_it_links_to_replacing_by_name_with_its_sequence():
    _, ids, spans = run_spans(failing=True)
    request = request_of(spans)
    scope_spans = request.resource_spans[0].scope_spans[0]
    trace = Trace(spans[0].trace_id, 0.0)
    for position, span in enumerate(scope_spans.spans):
        trace.add(position, span, ScopeOrigin(request.resource_spans[0], scope_spans))
    trace.sequence = 2
    results = [MetricResult(name="failure_localization", score=1 / 3, explanation="failed")]
    scored = Scored(results=results, attributes=sequence_attributes(results, 2))
    carrier = trace_carrier(trace, scored, {}, span_events=True, scope_version="test", start_ns=1)
    config = phoenix_exporter.PhoenixExporterConfig(endpoint="http://127.0.0.1:6006")
    spans_annotated, sessions = phoenix_exporter.PhoenixExporter("phoenix", config).annotations([carrier])
    assert sessions == []
    assert [(a["span_id"], a["name"], a["identifier"]) for a in spans_annotated] == [
        (ids["root"].hex(), "failure_localization", "spanscore")  # as the first scoring's: Phoenix replaces it
    ]
    assert spans_annotated[0]["metadata"]["sequence"] == 2


def test_a_late_span_rescore_replaces_the_root_annotation_in_phoenix(phoenix, start_collector):
    project = "spanscore-late"
    collector = start_collector(into_phoenix(phoenix, project, {"failure_localization": "{when: always}"}))
    _, ids, spans = run_spans(failing=True)
    root = ids["root"].hex()
    agent, tool_server = [spans[0], spans[1], spans[4]], [spans[2], spans[3]]

    def root_annotations() -> list[dict]:
        found = phoenix.span_annotations(project, [root])
        return [a for a in found if a["name"] == "failure_localization" and a["identifier"] == "spanscore"]

    status, _, _ = post(collector.http_port, request_of(agent).SerializeToString(), "application/x-protobuf")
    assert status == 200
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) == 3, timeout_s=20)
    assert len(stored) == 3  # the project exists once its first spans are stored
    first = wait_for(root_annotations, lambda found: len(found) == 1, timeout_s=30)
    assert [(a["result"]["label"], a["metadata"]["sequence"]) for a in first] == [("none_found", 1)]
    status, _, _ = post(collector.http_port, request_of(tool_server).SerializeToString(), "application/x-protobuf")
    assert status == 200
    latest = wait_for(root_annotations, lambda found: [a["metadata"]["sequence"] for a in found] == [2], timeout_s=30)
    assert [(a["result"]["label"], a["metadata"]["sequence"]) for a in latest] == [("rate_limiting", 2)]
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) == 6, timeout_s=20)
    assert sorted(s["name"] for s in stored).count("evaluate_trace") == 1


def test_a_late_trace_of_a_closed_session_replaces_its_session_annotation_in_phoenix(phoenix, start_collector):
    project, session_id = "spanscore-late-session", "phoenix-late-session"
    collector = start_collector(
        into_phoenix(
            phoenix,
            project,
            {"toy_metric": "{name: toy}"},
            assembler="trace_wait: 100ms, session_idle: 500ms, late_window: 1m",
        )
    )

    def send_turn() -> None:
        turn = test_spans.span(new_trace_id(), "turn", attributes={**AGENT_ROOT, "session.id": session_id})
        status, _, _ = post(collector.http_port, request_of([turn]).SerializeToString(), "application/x-protobuf")
        assert status == 200

    def annotations() -> list[dict]:
        found = phoenix.get(f"/v1/projects/{project}/session_annotations", session_ids=[session_id], limit=100)
        return [a for a in found["data"] if a["name"] == "toy_session"]

    def read(found: list[dict]) -> list[tuple]:
        return [(a["result"]["explanation"], a["metadata"]["sequence"], a["identifier"]) for a in found]

    send_turn()
    send_turn()
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) >= 2, timeout_s=20)
    assert len(stored) >= 2  # the project exists once its first spans are stored
    first = wait_for(annotations, lambda found: len(found) == 1, timeout_s=30)
    assert read(first) == [("2 of 2 traces complete", 1, "spanscore")]
    send_turn()  # within late_window of the close: the session opens again
    latest = wait_for(annotations, lambda found: [a["metadata"]["sequence"] for a in found] == [2], timeout_s=30)
    assert read(latest) == [("3 of 3 traces complete", 2, "spanscore")]  # replaced, not added


def test_the_annotator_kind_follows_who_scored_embedder_rag_metrics_are_code(phoenix, start_collector):
    """The RAG metrics scored by the embedder are CODE in Phoenix, as the embedding metrics
    are: an embedder is a model but not a judge (the pipeline's provenance says which)."""
    project = "spanscore-rag-kinds"
    collector = start_collector(into_phoenix(phoenix, project, {"rag_metrics": "{embedder: {type: hashing}}"}))
    body = (EXAMPLES / "rag-chatbot.json").read_bytes()
    status, _, _ = post(collector.http_port, body, "application/json")
    assert status == 200
    assert wait_until(lambda: collector.pipeline.counts.exported_traces >= 2, timeout_s=15)
    stored = wait_for(lambda: phoenix.spans(project), lambda found: len(found) == 7, timeout_s=20)
    span_ids = [span["context"]["span_id"] for span in stored]
    annotations = wait_for(
        lambda: phoenix.span_annotations(project, span_ids),
        lambda found: {"faithfulness", "context_relevance", "answer_relevance"} <= {a["name"] for a in found},
        timeout_s=30,
    )
    rag = [a for a in annotations if a["name"] in ("faithfulness", "context_relevance", "answer_relevance")]
    assert rag and {a["annotator_kind"] for a in rag} == {"CODE"}
    assert {a["metadata"]["evaluator"] for a in rag} == {"hashing-v1-d1024"}  # the embedder's name, not `code`
