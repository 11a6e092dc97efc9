"""failure_localization end to end: spans sent by a real OTLP client over loopback, the
blame exported on the span that shows the error (checked by span id), as a span event
and as a log record with category, impact and evidence, the summary on the root; a run
that passed gets nothing."""

from __future__ import annotations

from spanscore.core.attributes import attributes_to_dict
from tests.support.failing_run import run_spans
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import request_of


def config(sink, when: str = "failed") -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
  failure_localization: {{when: {when}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization], exporters: [otlp]}}
    logs: {{exporters: [otlp]}}
"""


def test_the_blame_is_on_the_failed_span_and_the_summary_on_the_root(sink, start_collector):
    collector = start_collector(config(sink))
    failed_id, failed, failed_spans = run_spans(failing=True)
    passed_id, _, passed_spans = run_spans(failing=False)
    send(collector.grpc_port, request_of(failed_spans + passed_spans))
    assert wait_until(lambda: len(sink.spans()) == 10)
    collector.stop()  # flushes the batched log records
    by_id = {span.span_id: span for span in sink.spans()}

    blamed = by_id[failed["http"]]
    [event] = blamed.events
    assert event.name == "gen_ai.evaluation.result"
    attributes = attributes_to_dict(event.attributes)
    root = attributes_to_dict(by_id[failed["root"]].attributes)
    assert attributes == {
        "gen_ai.evaluation.name": "failure_localization",
        "eval.evaluator": "code",
        "eval.revision": root["eval.failure_localization.revision"],
        "gen_ai.evaluation.score.label": "rate_limiting",
        "gen_ai.evaluation.explanation": "GET failed: HTTP 429",
        "eval.failure.category": "rate_limiting",
        "eval.failure.group": "system_execution",
        "eval.failure.impact": "medium",
        "eval.failure.evidence": "HTTP 429",
        "eval.failure.source": "evidence",
    }
    # Steps: chat (2,000), track (3,000), chat (6,000); the blamed GET is part of the
    # track step, the second: 1/3 of the run came before the first error.
    assert root["eval.failure_localization.score"] == 1 / 3
    assert root["eval.failure_localization.label"] == "rate_limiting"
    assert root["eval.failure_localization.span_ids"] == failed["http"].hex()
    assert root["eval.failure_localization.errors"] == 1
    assert root["eval.failure_localization.errors.system_execution"] == 1
    assert root["eval.failure_localization.errors.reasoning"] == 0
    assert root["eval.failure_localization.explanation"] == (
        f"the run failed (1 span with error status); first error at step 2 of 3, span {failed['http'].hex()} (GET): "
        "rate_limiting: GET failed: HTTP 429; 1 error (1 system execution); evidence only: no judge configured, "
        "so errors that need reading the run were not looked for"
    )
    assert root["eval.failure_localization.evaluator"] == "code"

    passed = [span for span in sink.spans() if span.trace_id == passed_id]
    assert all(not span.events for span in passed)
    assert not any(key.startswith("eval.") for span in passed for key in attributes_to_dict(span.attributes))

    records = [r for r in sink.log_records() if r.trace_id == failed_id]
    by_span = {record.span_id: attributes_to_dict(record.attributes) for record in records}
    assert set(by_span) == {failed["root"], failed["http"]}
    assert by_span[failed["http"]] == attributes
    assert by_span[failed["root"]]["gen_ai.evaluation.score.label"] == "rate_limiting"


def test_when_always_a_run_that_passed_gets_a_result_and_no_blame(sink, start_collector):
    collector = start_collector(config(sink, when="always"))
    trace_id, ids, spans = run_spans(failing=False)
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) == 5)
    by_id = {span.span_id: span for span in sink.spans()}
    root = attributes_to_dict(by_id[ids["root"]].attributes)
    assert root["eval.failure_localization.label"] == "none_found"
    assert root["eval.failure_localization.score"] == 1.0
    assert root["eval.failure_localization.errors"] == 0
    assert "eval.failure_localization.span_ids" not in root
    assert [len(span.events) for span in sink.spans() if span.span_id != ids["root"]] == [0, 0, 0, 0]


def test_the_session_carrier_names_the_turn_that_broke_it(sink, start_collector):
    collector = start_collector(
        config(sink).replace("assembler: {trace_wait: 20ms}", "assembler: {trace_wait: 20ms, session_idle: 300ms}")
    )
    sent = []
    for failing in (False, True, True):  # the second turn fails, and the third does not recover
        trace_id, ids, spans = run_spans(failing=failing)
        spans[0].attributes.add(key="session.id").value.string_value = "chat-9"
        sent.append((trace_id, ids))
        send(collector.grpc_port, request_of(spans))
        expected = 5 * len(sent)
        assert wait_until(lambda n=expected: len(sink.spans()) == n)  # one turn after the other
    assert wait_until(lambda: any(s.name == "evaluate_session" for s in sink.spans()), timeout_s=5)
    [carrier] = [s for s in sink.spans() if s.name == "evaluate_session"]
    attributes = attributes_to_dict(carrier.attributes)
    second_trace, second = sent[1]
    assert attributes["eval.breaking_turn.label"] == "rate_limiting"
    assert attributes["eval.breaking_turn.score"] == 1 / 3  # one of three turns came before it
    assert attributes["eval.breaking_turn.turn"] == 2
    assert attributes["eval.breaking_turn.trace_id"] == second_trace.hex()
    assert attributes["eval.breaking_turn.span_id"] == second["http"].hex()
    assert attributes["eval.breaking_turn.explanation"].startswith(
        f"turn 2 of 3 (trace {second_trace.hex()}) broke the session: it failed (1 span with error status) "
        "and the 1 turn after it failed too; first error rate_limiting at span"
    )


def test_in_a_scoring_worker_the_blame_lands_on_the_same_span(sink, start_collector):
    # The worker localizes a copy of the trace; the collector writes the finding onto its
    # own span of that id.
    collector = start_collector(
        config(sink).replace("assembler: {trace_wait: 20ms}", "assembler: {trace_wait: 20ms, scoring_workers: 1}")
    )
    trace_id, ids, spans = run_spans(failing=True)
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) == 5, timeout_s=30)
    by_id = {span.span_id: span for span in sink.spans()}
    [event] = by_id[ids["http"]].events
    assert attributes_to_dict(event.attributes)["eval.failure.category"] == "rate_limiting"
    root = attributes_to_dict(by_id[ids["root"]].attributes)
    assert root["eval.failure_localization.span_ids"] == ids["http"].hex()
