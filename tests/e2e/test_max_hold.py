"""A slow judge never holds the telemetry (`max_hold`), over OTLP with a loopback OpenAI
server as the judge: the trace reaches the exporter within `max_hold` with its no-judge
results and `eval.<metric>.pending` for the judge's; the judge's results follow on an
`evaluate_trace` carrier of the same trace, with the first scoring's sequence; no span
id is sent twice and Prometheus counts each result once. The judge's scores show the
plumbing only: the loopback judge answers what the test tells it."""

from __future__ import annotations

import signal
import time

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES, NO_TOOL_CALLS, NO_TOOLS
from tests.support.agent_session import send_turn, turn_request
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_client import post
from tests.support.ports import free_port
from tests.support.processes import launch
from tests.support.running import scraped_samples, wait_until
from tests.support.spans import new_trace_id

HOLD = "not scored within max_hold (500ms)"
# No tools offered or called: these are skipped without the judge, `.skipped` saying why.
SKIPPED = {"tool_correctness": NO_TOOLS, "argument_correctness": NO_TOOL_CALLS}
JUDGED = [m for m in METRIC_NAMES if m not in SKIPPED]


def judge_metrics(base_url: str, judge: str = "") -> str:
    fast = "max_retries: 1, initial_backoff: 50ms, max_backoff: 200ms"
    return (
        f"  judge_metrics: {{judge: {{model: judge-test, base_url: '{base_url}', api_key: test-key, {fast}{judge}}}}}"
    )


def config(sink, judge_url: str, prometheus: int, judge: str = "", assembler: str = "") -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, max_hold: 500ms{assembler}}}
  failure_localization: {{when: always}}
{judge_metrics(judge_url, judge)}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
  prometheus: {{endpoint: '127.0.0.1:{prometheus}'}}
service:
  shutdown_timeout: 10s
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, failure_localization, judge_metrics], exporters: [otlp]}}
    metrics: {{exporters: [prometheus], export_interval: 1s}}
"""


def _root_and_carrier(sink):
    spans = sink.spans()
    [root] = [s for s in spans if not s.parent_span_id]
    carriers = [s for s in spans if s.name == "evaluate_trace"]
    return root, carriers


def _counted(prometheus: int, counter: str) -> dict[str, float]:
    """`counter`'s samples by metric name, summed over the other labels."""
    counts: dict[str, float] = {}
    for (name, labels), value in scraped_samples(prometheus).items():
        if name == counter:
            metric = dict(labels)["gen_ai_evaluation_name"]
            counts[metric] = counts.get(metric, 0.0) + value
    return counts


def _left_with_pending(root) -> dict:
    """The root's attributes, checked: the no-judge result on it, sequence 1, and every
    judge metric pending."""
    first = attributes_to_dict(root.attributes)
    assert (first["eval.failure_localization.label"], first["eval.failure_localization.sequence"]) == (
        "none_found",
        1,
    )
    assert {k: v for k, v in first.items() if k.endswith(".pending")} == {
        f"eval.{m}.pending": HOLD for m in METRIC_NAMES
    }
    return first


def _followed_on_a_carrier(sink, trace_id: bytes, root) -> None:
    """The judge's results followed on one carrier of the trace, child of the root and
    linked to it, sequence 1 (they complete the first scoring; a re-score's is 2..); no
    span id sent twice."""
    assert wait_until(lambda: len(sink.spans()) == 2, timeout_s=15)
    root_again, [carrier] = _root_and_carrier(sink)
    assert root_again.span_id == root.span_id
    assert carrier.trace_id == trace_id and carrier.parent_span_id == root.span_id
    assert [link.span_id for link in carrier.links] == [root.span_id]
    followed = attributes_to_dict(carrier.attributes)
    assert {followed[f"eval.{m}.score"] for m in JUDGED} == {0.8}
    assert {followed[f"eval.{m}.sequence"] for m in JUDGED} == {1}
    assert {m: followed[f"eval.{m}.skipped"] for m in SKIPPED} == SKIPPED
    assert not [k for k in followed if k.startswith("eval.failure_localization.") or k.endswith(".pending")]
    sent_ids = [s.span_id for s in sink.spans()]
    assert len(sent_ids) == len(set(sent_ids)) == 2


def test_a_slow_judge_does_not_hold_the_trace_its_results_follow_on_a_carrier(sink, start_collector):
    prometheus = free_port()
    judge = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    judge.chat_latency_s = 3.0  # answers, well past max_hold
    judge.start()
    try:
        collector = start_collector(config(sink, judge.base_url, prometheus))
        sent = time.monotonic()
        trace_id = send_turn(collector, "slow judge")
        assert wait_until(lambda: len(sink.spans()) == 1, timeout_s=10)
        left_after = time.monotonic() - sent
        assert left_after < 2.5  # max_hold (500ms) after trace_wait, not the judge's 3s
        root, carriers = _root_and_carrier(sink)
        assert carriers == []
        first = _left_with_pending(root)
        assert not [k for k in first if k.startswith(tuple(f"eval.{m}." for m in METRIC_NAMES)) and "pending" not in k]
        _followed_on_a_carrier(sink, trace_id, root)

        # Each metric counted once in the results series, nothing as a re-score.
        expected = {"failure_localization": 1.0, **{m: 1.0 for m in JUDGED}}
        assert wait_until(lambda: _counted(prometheus, "gen_ai_evaluation_results_total") == expected)
        assert _counted(prometheus, "gen_ai_evaluation_rescores_total") == {}
    finally:
        judge.stop()


def test_a_judge_that_never_answers_leaves_the_trace_scored_its_errors_follow_by_max_judge_wait(sink, start_collector):
    prometheus = free_port()
    judge = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    judge.chat_latency_s = 60.0  # accepts the connection, never answers in the test's time
    judge.start()
    try:
        collector = start_collector(config(sink, judge.base_url, prometheus, judge=", timeout: 1s, max_judge_wait: 2s"))
        sent = time.monotonic()
        send_turn(collector, "silent judge")
        assert wait_until(lambda: len(sink.spans()) == 1, timeout_s=10)
        assert time.monotonic() - sent < 1.5  # before the judge's first timeout
        root, _ = _root_and_carrier(sink)
        first = attributes_to_dict(root.attributes)
        assert first["eval.failure_localization.label"] == "none_found"
        assert {f"eval.{m}.pending" for m in JUDGED} <= set(first)

        assert wait_until(lambda: len(sink.spans()) == 2, timeout_s=20)
        _, [carrier] = _root_and_carrier(sink)
        followed = attributes_to_dict(carrier.attributes)
        assert {m for m in JUDGED if f"eval.{m}.error" in followed} == set(JUDGED)
        assert {followed[f"eval.{m}.sequence"] for m in JUDGED} == {1}
    finally:
        judge.stop()


def test_with_scoring_workers_a_slow_judge_does_not_hold_the_trace_either(sink, tmp_path):
    """`spanscore run` with a scoring worker, sent the turn over OTLP/HTTP: the worker says
    what it has at max_hold, the trace leaves with it, the judge's results follow."""
    prometheus, http = free_port(), free_port()
    judge = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    judge.chat_latency_s = 3.0  # no answer within max_hold, then the answer
    judge.start()
    config_path = tmp_path / "workers.yaml"
    receiver = f"receivers: {{otlp: {{protocols: {{http: {{endpoint: '127.0.0.1:{http}'}}}}}}}}"
    config_path.write_text(
        config(sink, judge.base_url, prometheus, assembler=", scoring_workers: 1").replace(
            "receivers: {otlp: {protocols: {grpc: {endpoint: 127.0.0.1:0}}}}", receiver
        )
    )
    process = launch(config_path, http)
    try:
        trace_id = new_trace_id()
        sent = time.monotonic()
        status, _, _ = post(http, turn_request("worker-scored", trace_id).SerializeToString(), "application/x-protobuf")
        assert status == 200
        assert wait_until(lambda: len(sink.spans()) == 1, timeout_s=10)
        assert time.monotonic() - sent < 2.5  # max_hold (500ms) after trace_wait, not the judge's 3s
        root, carriers = _root_and_carrier(sink)
        assert carriers == [] and root.trace_id == trace_id
        _left_with_pending(root)
        _followed_on_a_carrier(sink, trace_id, root)
        # Counted once each, by the collector: the worker prepared nothing for a trace that left.
        expected = {"failure_localization": 1.0, **{m: 1.0 for m in JUDGED}}
        assert wait_until(lambda: _counted(prometheus, "gen_ai_evaluation_results_total") == expected)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        judge.stop()
    assert process.returncode == 0, stderr


@pytest.mark.parametrize("workers", [0, 1], ids=["in_process", "scoring_workers"])
def test_past_max_following_traces_the_oldest_judge_calls_are_given_up_their_metrics_skipped(
    sink, start_collector, workers
):
    judge = OpenAIServer(handler=schema_judge(score=0.8), port=free_port())
    judge.chat_latency_s = 60.0  # accepts the connection, never answers in the test's time
    judge.start()
    try:
        collector = start_collector(
            config(
                sink, judge.base_url, free_port(), assembler=f", max_following_traces: 2, scoring_workers: {workers}"
            )
        )
        sent = []
        for number in range(4):  # one at a time: each its own scoring
            sent.append(send_turn(collector, f"silent judge {number}"))
            assert wait_until(lambda: len(sink.spans()) >= len(sent), timeout_s=10)
        # The third and fourth to leave took the first two past the bound: given up now,
        # not at max_judge_wait (10 min).
        assert wait_until(lambda: len(sink.spans()) == 6, timeout_s=10)
        time.sleep(0.5)
        spans = sink.spans()
        assert len(spans) == 6
        carriers = {s.trace_id: attributes_to_dict(s.attributes) for s in spans if s.name == "evaluate_trace"}
        assert set(carriers) == set(sent[:2])
        reason = "given up: results of more than 2 traces were following (max_following_traces)"
        for followed in carriers.values():
            assert {followed[f"eval.{m}.skipped"] for m in JUDGED} == {reason}
            assert not [k for k in followed if k.endswith((".score", ".error", ".pending"))]
    finally:
        judge.stop()
