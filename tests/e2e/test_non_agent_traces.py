"""A trace that is no agent's goes through a scoring pipeline untouched: the OTLP
specification's example trace is forwarded byte for byte, with no score and no metric."""

from __future__ import annotations

from pathlib import Path

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import decode_request
from tests.support.agent_session import METRICS, send_session
from tests.support.otlp_client import post
from tests.support.running import wait_until

# opentelemetry-proto's examples/trace.json, as published: one server span of
# `my.service` whose parent is elsewhere, no GenAI or other agent attribute.
SPEC_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otlp-spec-trace.json"


def scoring_config(sink) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}, http: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, trace_timeout: 300ms, session_idle: 300ms}}
{METRICS}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, embedding_metrics, session_metrics], exporters: [otlp]}}
    metrics: {{exporters: [otlp], export_interval: 200ms}}
"""


def test_the_otlp_specification_example_is_forwarded_byte_for_byte_and_never_scored(sink, start_collector):
    collector = start_collector(scoring_config(sink))
    body = SPEC_EXAMPLE.read_bytes()
    sent = decode_request(body)
    [trace_id] = {s.trace_id for rs in sent.resource_spans for ss in rs.scope_spans for s in ss.spans}
    status, _, _ = post(collector.http_port, body, "application/json")
    assert status == 200
    assert wait_until(lambda: any(s.trace_id == trace_id for s in sink.spans()))  # at trace_timeout: no root
    [forwarded] = [
        r
        for r in sink.requests
        if any(s.trace_id == trace_id for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans)
    ]
    assert forwarded.SerializeToString() == sent.SerializeToString()

    send_session(collector)  # an agent's session next to it, so scores and metrics do flow
    assert wait_until(lambda: any(s.name == "evaluate_session" for s in sink.spans()), timeout_s=10)
    collector.stop()  # the final flush exports the cumulative metric totals
    results = sink.metric_points("gen_ai.evaluation.results")
    services = {attributes_to_dict(p.attributes)["service.name"] for p in results}
    names = {attributes_to_dict(p.attributes)["gen_ai.evaluation.name"] for p in results}
    assert services == {"agent"}  # none for my.service
    assert names == {"coherence", "loop_detection", "agent_reliability", "agent_consistency"}
    [carrier] = [s for s in sink.spans() if s.name == "evaluate_session"]
    assert attributes_to_dict(carrier.attributes)["eval.session.trace_count"] == 3
    assert trace_id not in {link.trace_id for link in carrier.links}
    assert collector.pipeline.counts.unscored_traces == 1
