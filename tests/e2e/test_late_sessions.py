"""A late trace of a closed session end to end, over OTLP: a session of two traces closes
(its `evaluate_session` carrier out), a third trace of it arrives within `late_window`,
and a second carrier follows, scored over all three traces with `eval.<metric>.sequence`
2; no span id is sent twice; Prometheus counts the session's result once and the
re-score on its own series."""

from __future__ import annotations

from spanscore.core.attributes import attributes_to_dict
from tests.support.otlp_client import send
from tests.support.ports import free_port
from tests.support.running import scraped_samples, wait_until
from tests.support.spans import AGENT_ROOT, new_trace_id, request_of, span
from tests.support.toy_metric import TOY


def config(sink, prometheus: int) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms, session_idle: 300ms, late_window: 1m}}
{TOY}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, toy_metric], exporters: [otlp]}}
    metrics: {{exporters: [prometheus], export_interval: 1s}}
"""


def send_turn(collector) -> None:
    """One agent turn of session s1, a single root span."""
    attributes = {**AGENT_ROOT, "session.id": "s1"}
    send(collector.grpc_port, request_of([span(new_trace_id(), "turn", attributes=attributes)]))


def carriers(sink) -> list[dict]:
    found = [attributes_to_dict(s.attributes) for s in sink.spans() if s.name == "evaluate_session"]
    return sorted(found, key=lambda a: a["eval.toy_session.sequence"])


def session_samples(prometheus: int, counter: str) -> dict[str, float]:
    return {
        dict(labels)["gen_ai_evaluation_score_label"]: value
        for (name, labels), value in scraped_samples(prometheus).items()
        if name == counter and dict(labels).get("gen_ai_evaluation_name") == "toy_session"
    }


def test_a_late_trace_of_a_closed_session_sends_a_second_carrier_over_the_whole_session(sink, start_collector):
    prometheus = free_port()
    collector = start_collector(config(sink, prometheus))
    send_turn(collector)
    send_turn(collector)
    assert wait_until(lambda: len(carriers(sink)) == 1)
    [first] = carriers(sink)
    assert (first["eval.session.trace_count"], first["eval.toy_session.sequence"]) == (2, 1)

    send_turn(collector)  # within late_window of the close
    assert wait_until(lambda: len(carriers(sink)) == 2)
    first, second = carriers(sink)
    assert (second["eval.session.trace_count"], second["eval.toy_session.sequence"]) == (3, 2)
    assert second["eval.toy_session.explanation"] == "3 of 3 traces complete"
    assert second["session.id"] == "s1"
    spans = sink.spans()
    sent = [s.span_id for s in spans]
    assert len(sent) == len(set(sent)) == 5  # three turns, two carriers
    [later] = [s for s in spans if s.name == "evaluate_session" and len(s.links) == 4]  # 3 turns + first carrier
    [earlier] = [s for s in spans if s.name == "evaluate_session" and s is not later]
    assert later.trace_id != earlier.trace_id and earlier.span_id in {link.span_id for link in later.links}

    # The session's first result in the pass-rate series, its re-score on its own.
    assert wait_until(lambda: session_samples(prometheus, "gen_ai_evaluation_rescores_total") == {"pass": 1.0})
    assert session_samples(prometheus, "gen_ai_evaluation_results_total") == {"pass": 1.0}
