"""Late spans end to end, over OTLP: a tool server's failing span arriving after its trace
was scored re-scores the trace. The re-score's results reach the sink on an
`evaluate_trace` carrier in the same trace, told apart from the first by
`eval.<metric>.sequence`; no span id is sent twice; Prometheus counts the trace's
result once and the re-score on its own series. With file_storage the trace awaits its
late spans across a restart, killed or stopped."""

from __future__ import annotations

import signal
import time

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.failing_run import run_spans
from tests.support.otlp_client import send
from tests.support.otlp_json import written_spans
from tests.support.ports import free_port
from tests.support.processes import launch
from tests.support.running import scraped_samples, wait_until
from tests.support.spans import request_of


def config(sink, prometheus: int, late_spans: str = "rescore", workers: int = 0) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, late_spans: {late_spans}, late_window: 1m, scoring_workers: {workers}}}
  failure_localization: {{when: always}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization], exporters: [otlp]}}
    metrics: {{exporters: [prometheus], export_interval: 1s}}
"""


def _send_run_then_tool_server_late(collector, sink):
    """The agent's spans first, scored; then the tool server's two (tool call, failed GET)."""
    trace_id, ids, spans = run_spans(failing=True)
    agent, tool_server = [spans[0], spans[1], spans[4]], [spans[2], spans[3]]
    send(collector.grpc_port, request_of(agent))
    assert wait_until(lambda: len(sink.spans()) == 3)
    send(collector.grpc_port, request_of(tool_server))
    return trace_id, ids


def _results(prometheus: int, counter: str) -> dict[str, float]:
    """failure_localization's samples of `counter` by label."""
    return {
        dict(labels)["gen_ai_evaluation_score_label"]: value
        for (name, labels), value in scraped_samples(prometheus).items()
        if name == counter and dict(labels).get("gen_ai_evaluation_name") == "failure_localization"
    }


@pytest.mark.parametrize("workers", [0, 1], ids=["in_process", "scoring_workers"])
def test_a_late_failing_tool_span_flips_failure_localization_on_a_carrier_counted_once(sink, start_collector, workers):
    prometheus = free_port()
    collector = start_collector(config(sink, prometheus, workers=workers))
    trace_id, ids = _send_run_then_tool_server_late(collector, sink)
    assert wait_until(lambda: any(s.name == "evaluate_trace" for s in sink.spans()))

    spans = sink.spans()
    sent = [span.span_id for span in spans]
    assert len(sent) == len(set(sent)) == 6  # the five of the run and the carrier, each once
    root = attributes_to_dict(next(s for s in spans if s.span_id == ids["root"]).attributes)
    # First scored without the tool server's spans: nothing had failed.
    assert (root["eval.failure_localization.label"], root["eval.failure_localization.sequence"]) == ("none_found", 1)
    [carrier] = [s for s in spans if s.name == "evaluate_trace"]
    assert carrier.trace_id == trace_id and carrier.parent_span_id == ids["root"]
    assert [link.span_id for link in carrier.links] == [ids["root"]]
    rescored = attributes_to_dict(carrier.attributes)
    assert rescored["eval.failure_localization.label"] == "rate_limiting"
    assert rescored["eval.failure_localization.sequence"] == 2
    assert rescored["eval.failure_localization.span_ids"] == ids["http"].hex()
    assert rescored["eval.failure_localization.score"] == 1 / 3
    # The carrier's result event, as the root's: a backend reading events sees both.
    [event] = [attributes_to_dict(e.attributes) for e in carrier.events]
    assert event["gen_ai.evaluation.score.label"] == "rate_limiting"

    # One trace, one result in the pass-rate series; the re-score on its own.
    assert wait_until(lambda: _results(prometheus, "gen_ai_evaluation_rescores_total") == {"rate_limiting": 1.0})
    assert _results(prometheus, "gen_ai_evaluation_results_total") == {"none_found": 1.0}


def test_late_spans_forward_sends_the_late_spans_and_scores_nothing_again(sink, start_collector):
    prometheus = free_port()
    collector = start_collector(config(sink, prometheus, late_spans="forward"))
    _send_run_then_tool_server_late(collector, sink)
    assert wait_until(lambda: len(sink.spans()) == 5)
    assert wait_until(lambda: _results(prometheus, "gen_ai_evaluation_results_total") == {"none_found": 1.0})
    collector.stop()
    assert [s.name for s in sink.spans()].count("evaluate_trace") == 0
    assert len(sink.spans()) == 5


DURABLE_CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, late_window: 1m}}
  failure_localization: {{when: always}}
exporters:
  file: {{path: '{output}'}}
extensions:
  file_storage: {{directory: '{directory}'}}
service:
  extensions: [file_storage]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization], exporters: [file]}}
"""


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_late_failing_tool_span_after_a_restart_still_rescores_the_trace(tmp_path, stop):
    port, output = free_port(), tmp_path / "scored.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(DURABLE_CONFIG.format(port=port, output=output, directory=tmp_path / "storage"))
    trace_id, ids, spans = run_spans(failing=True)
    agent, tool_server = [spans[0], spans[1], spans[4]], [spans[2], spans[3]]

    collector = launch(config, port)
    try:
        send(port, request_of(agent))
        assert wait_until(lambda: len(written_spans(output)) == 3, timeout_s=10)
        time.sleep(0.5)  # its log marks written: a kill before them would send it again, as the log's docs say
        collector.send_signal(stop)
        _, stderr = collector.communicate(timeout=60)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == -stop if stop == signal.SIGKILL else collector.returncode == 0, stderr

    collector = launch(config, port)
    try:
        send(port, request_of(tool_server))
        assert wait_until(lambda: any(s.name == "evaluate_trace" for s in written_spans(output)), timeout_s=15)
        collector.send_signal(signal.SIGTERM)
        _, stderr = collector.communicate(timeout=60)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == 0, stderr
    assert "replayed" not in stderr  # the trace was done with in the log: only its copy was kept

    written = written_spans(output)
    sent = [span.span_id for span in written]
    assert len(sent) == len(set(sent)) == 6  # the five of the run and the carrier, each once, over both runs
    root = attributes_to_dict(next(s for s in written if s.span_id == ids["root"]).attributes)
    assert (root["eval.failure_localization.label"], root["eval.failure_localization.sequence"]) == ("none_found", 1)
    [carrier] = [s for s in written if s.name == "evaluate_trace"]
    assert carrier.trace_id == trace_id and carrier.parent_span_id == ids["root"]
    rescored = attributes_to_dict(carrier.attributes)
    # Re-scored with the spans the trace had before the restart and the late ones.
    assert rescored["eval.failure_localization.label"] == "rate_limiting"
    assert rescored["eval.failure_localization.sequence"] == 2
    assert rescored["eval.failure_localization.span_ids"] == ids["http"].hex()
    assert rescored["eval.failure_localization.score"] == 1 / 3
