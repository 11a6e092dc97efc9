"""The evaluation events as OTLP log records (`service.pipelines.logs`): one record per
score, event name `gen_ai.evaluation.result`, correlated with the scored span by trace
and span id, through `otlp`, `otlphttp` and `file`; span events stay on by default and
can be switched off."""

from __future__ import annotations

import json

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.provenance import CODE_PROVENANCE
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import TOY


def config(sink, tmp_path, span_events: bool = True) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
{TOY}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
  otlphttp: {{endpoint: http://127.0.0.1:{sink.http_port}}}
  file: {{path: {tmp_path / "scored.jsonl"}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, toy_metric], exporters: [otlp],
              span_events: {str(span_events).lower()}}}
    logs: {{exporters: [otlp, otlphttp, file]}}
"""


def send_trace(collector, response_id: str | None = None) -> tuple[bytes, bytes]:
    trace_id, root_id = new_trace_id(), new_span_id()
    attributes = {**AGENT_ROOT, **({"gen_ai.response.id": response_id} if response_id else {})}
    send(
        collector.grpc_port,
        request_of(
            [span(trace_id, "agent", span_id=root_id, attributes=attributes), span(trace_id, "step", parent=root_id)]
        ),
    )
    return trace_id, root_id


def test_each_score_is_a_log_record_on_every_logs_exporter(sink, start_collector, tmp_path):
    collector = start_collector(config(sink, tmp_path))
    trace_id, root_id = send_trace(collector, response_id="chatcmpl-42")
    assert wait_until(lambda: len(sink.spans()) == 2)
    collector.stop()  # flushes the batched records
    for transport in ("grpc", "http"):
        [record] = sink.log_records(transport)
        assert (record.trace_id, record.span_id) == (trace_id, root_id)
        assert record.event_name == "gen_ai.evaluation.result"
        assert attributes_to_dict(record.attributes) == {
            "gen_ai.evaluation.name": "toy",
            "eval.evaluator": "code",
            "eval.revision": CODE_PROVENANCE.revision,
            "gen_ai.evaluation.score.value": 0.5,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.explanation": "2 spans",
            "gen_ai.response.id": "chatcmpl-42",
        }
    [line] = (tmp_path / "scored.logs.jsonl").read_text().splitlines()
    [written] = json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    assert (written["traceId"], written["spanId"]) == (trace_id.hex(), root_id.hex())
    assert written["eventName"] == "gen_ai.evaluation.result"
    root = next(s for s in sink.spans() if s.name == "agent")
    assert [e.name for e in root.events] == ["gen_ai.evaluation.result"]  # span events stay on by default


def test_span_events_off_leaves_the_log_records_and_the_attributes(sink, start_collector, tmp_path):
    collector = start_collector(config(sink, tmp_path, span_events=False))
    send_trace(collector)
    assert wait_until(lambda: len(sink.spans()) == 2)
    collector.stop()
    root = next(s for s in sink.spans() if s.name == "agent")
    assert list(root.events) == []
    assert attributes_to_dict(root.attributes)["eval.toy.score"] == 0.5
    assert len(sink.log_records("grpc")) == 1
