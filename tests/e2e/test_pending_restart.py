"""A trace that left at `max_hold` with `eval.<metric>.pending`, then a restart, with
file_storage: over OTLP into a `spanscore run` with a loopback judge that never answers,
stopped (SIGKILL or SIGTERM) after the trace left, started again with a judge that
answers: the judge's results follow on the carrier, sequence 1, and every span id
reaches the exporter once over both runs. The judge's scores show the
plumbing only: the loopback judge answers what the test tells it."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.agent_session import send_turn
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_json import written_spans
from tests.support.ports import free_port
from tests.support.processes import launch
from tests.support.running import wait_until

CONFIG = """
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: '127.0.0.1:{port}'}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, max_hold: 500ms}}
  judge_metrics:
    judge: {{model: judge-test, base_url: '{judge}', api_key: test-key,
             max_retries: 1, initial_backoff: 50ms, max_backoff: 200ms}}
exporters:
  file: {{path: '{output}'}}
extensions:
  file_storage: {{directory: '{directory}'}}
service:
  shutdown_timeout: 2s
  extensions: [file_storage]
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, judge_metrics], exporters: [file]}}
"""


def _stop(collector, how: signal.Signals) -> str:
    try:
        collector.send_signal(how)
        _, stderr = collector.communicate(timeout=60)
    finally:
        if collector.poll() is None:
            collector.kill()
    return stderr


def _left_pending_then_restarted(tmp_path: Path, stop: signal.Signals) -> tuple[bytes, list]:
    """A turn sent to a run whose judge never answers, the run stopped with `stop` once
    the trace left with `.pending`, then a run whose judge answers, stopped after the time
    a carrier would take. The trace id and the spans written over both runs."""
    port, output, config = free_port(), tmp_path / "scored.jsonl", tmp_path / "config.yaml"
    silent = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    silent.chat_latency_s = 60.0  # accepts the connection, never answers in the test's time
    silent.start()
    try:
        config.write_text(CONFIG.format(port=port, judge=silent.base_url, output=output, directory=tmp_path / "s"))
        collector = launch(config, port)
        try:
            trace_id = send_turn(SimpleNamespace(grpc_port=port), "restarted judge")
            assert wait_until(lambda: len(written_spans(output)) == 1, timeout_s=10)
            [root] = written_spans(output)
            assert any(key.endswith(".pending") for key in attributes_to_dict(root.attributes))
            time.sleep(0.5)  # its log marks written, as in the late-span restart test
        finally:
            stderr = _stop(collector, stop)
    finally:
        silent.stop()
    assert collector.returncode == (-stop if stop == signal.SIGKILL else 0), stderr

    judge = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    judge.start()
    try:
        config.write_text(CONFIG.format(port=port, judge=judge.base_url, output=output, directory=tmp_path / "s"))
        collector = launch(config, port)
        try:
            wait_until(lambda: any(s.name == "evaluate_trace" for s in written_spans(output)), timeout_s=10)
            time.sleep(1.0)  # a second carrier, or the root replayed, would be written by now
        finally:
            stderr = _stop(collector, signal.SIGTERM)
    finally:
        judge.stop()
    assert collector.returncode == 0, stderr
    return trace_id, written_spans(output)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_trace_that_left_pending_is_not_replayed_after_a_restart(tmp_path, stop):
    """The log is acknowledged when the trace left at max_hold, pending results or not:
    the restart does not send its spans again."""
    trace_id, written = _left_pending_then_restarted(tmp_path, stop)
    sent = [span.span_id for span in written]
    assert len(sent) == len(set(sent))
    assert [s.trace_id for s in written if s.name != "evaluate_trace"] == [trace_id]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_pending_results_follow_after_a_restart(tmp_path, stop):
    """The judge's results follow after the restart, on one carrier with sequence 1: a
    SIGKILL does not lose them, a SIGTERM does not give them up as skipped."""
    trace_id, written = _left_pending_then_restarted(tmp_path, stop)
    carriers = [s for s in written if s.name == "evaluate_trace"]
    assert len(carriers) == 1
    results = attributes_to_dict(carriers[0].attributes)
    assert carriers[0].trace_id == trace_id
    assert results["eval.task_completion.score"] == 0.8
    assert not any(key.endswith(".pending") for key in results)
    # Skipped only for the metrics' own reasons (no tool in this turn), not the stop's.
    skipped = {key: value for key, value in results.items() if key.endswith(".skipped")}
    assert skipped == {
        "eval.tool_correctness.skipped": "no tools offered or called",
        "eval.argument_correctness.skipped": "no tool calls to judge",
    }
    assert {value for key, value in results.items() if key.endswith(".sequence")} == {1}
