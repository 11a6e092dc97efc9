"""Span targets end to end: spans sent by a real OTLP client over loopback, a span-level
metric (tests/support/span_metric.py) scoring the model calls its `where` chooses; the
exported OTLP checked by span id: each result and its evaluation event on the span it
names, the roll-up on the root, nothing on the spans left out. The same in the collector
process and in a scoring worker (whose encoded bytes the collector sends as they are),
and when the trace comes back scored (a chained collector): replaced, not added to."""

from __future__ import annotations

import json

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.agent_spans import make_span
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import evaluation_events, new_span_id, new_trace_id, request_of

ROOT_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "support-bot",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Where is it?"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Soon."}]}]),
}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
NAMES = ("root", "plan", "tool", "answer", "summary")


def agent_run():
    """(trace id, span id by role, spans): three model calls, a tool call; `summary` is a
    model call the metric's `where` leaves out."""
    trace_id = new_trace_id()
    ids = {name: new_span_id() for name in NAMES}
    spans = [
        make_span(
            "invoke_agent support-bot", ROOT_ATTRIBUTES, id=ids["root"], start=1_000, end=9_000, trace_id=trace_id
        ),
        make_span("chat plan", CHAT, id=ids["plan"], parent=ids["root"], start=2_000, trace_id=trace_id),
        make_span(
            "execute_tool track",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "track"},
            id=ids["tool"],
            parent=ids["root"],
            start=3_000,
            trace_id=trace_id,
        ),
        make_span("chat answer", CHAT, id=ids["answer"], parent=ids["root"], start=4_000, trace_id=trace_id),
        make_span("chat summary", CHAT, id=ids["summary"], parent=ids["root"], start=5_000, trace_id=trace_id),
    ]
    return trace_id, ids, spans


def config(sink, workers: int = 0, metric: str = "") -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms, scoring_workers: {workers}}}
  span_metric: {{on: llm, where: {{span_names: [chat plan, chat answer]}}{metric}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, span_metric], exporters: [otlp]}}
"""


def scored_spans(sink, collector, spans, count: int = 5, timeout_s: float = 10.0):
    """The spans exported once `count` arrived, by id (of a repeated id, the last)."""
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) >= count, timeout_s=timeout_s)
    return {span.span_id: span for span in sink.spans()}


def span_ok(span) -> dict:
    return {key: value for key, value in attributes_to_dict(span.attributes).items() if key.startswith("eval.span_ok.")}


def assert_scored_on_their_spans(by_id, ids) -> None:
    plan, answer = span_ok(by_id[ids["plan"]]), span_ok(by_id[ids["answer"]])
    assert plan["eval.span_ok.score"] == 0.2 and plan["eval.span_ok.label"] == "fail"
    assert plan["eval.span_ok.explanation"] == "span chat plan"
    assert answer["eval.span_ok.score"] == 1.0 and answer["eval.span_ok.label"] == "pass"
    for name, score, label in (("plan", 0.2, "fail"), ("answer", 1.0, "pass")):
        [event] = evaluation_events(by_id[ids[name]])
        assert event["gen_ai.evaluation.name"] == "span_ok"
        assert (event["gen_ai.evaluation.score.value"], event["gen_ai.evaluation.score.label"]) == (score, label)
    root = span_ok(by_id[ids["root"]])
    assert (root["eval.span_ok.spans"], root["eval.span_ok.failing"]) == (2, 1)
    assert (root["eval.span_ok.min"], root["eval.span_ok.mean"]) == (0.2, pytest.approx(0.6))
    assert (root["eval.span_ok.score"], root["eval.span_ok.label"]) == (0.2, "fail")
    [rollup] = [e for e in evaluation_events(by_id[ids["root"]]) if e["gen_ai.evaluation.name"] == "span_ok"]
    assert rollup["gen_ai.evaluation.score.label"] == "fail"
    for left_out in ("tool", "summary"):
        assert not span_ok(by_id[ids[left_out]]) and not evaluation_events(by_id[ids[left_out]])


@pytest.mark.parametrize("workers", [0, 1])
def test_span_level_scores_are_on_the_scored_spans_and_rolled_up_on_the_root(sink, start_collector, workers):
    collector = start_collector(config(sink, workers))
    _, ids, spans = agent_run()
    by_id = scored_spans(sink, collector, spans, timeout_s=30 if workers else 10)
    assert_scored_on_their_spans(by_id, ids)


@pytest.mark.parametrize("workers", [0, 1])
def test_scored_again_the_spans_scored_now_replace_those_scored_before(sink, start_collector, workers):
    # A chained collector: the first scored plan and answer; the second scores only the
    # answer, so the plan's result goes and the root's roll-up is the answer's alone.
    first = start_collector(config(sink, workers))
    _, ids, spans = agent_run()
    scored = list(scored_spans(sink, first, spans, timeout_s=30 if workers else 10).values())
    second = start_collector(config(sink, workers).replace("chat plan, ", ""))
    by_id = scored_spans(sink, second, scored, count=10, timeout_s=30 if workers else 10)  # the later of each id
    assert not span_ok(by_id[ids["plan"]]) and not evaluation_events(by_id[ids["plan"]])
    assert [e["gen_ai.evaluation.score.value"] for e in evaluation_events(by_id[ids["answer"]])] == [1.0]
    root = span_ok(by_id[ids["root"]])
    assert (root["eval.span_ok.spans"], root["eval.span_ok.failing"], root["eval.span_ok.label"]) == (1, 0, "pass")
    assert len([e for e in evaluation_events(by_id[ids["root"]]) if e["gen_ai.evaluation.name"] == "span_ok"]) == 1


def test_a_result_naming_a_span_not_in_the_trace_is_an_error_on_the_root(sink, start_collector):
    collector = start_collector(config(sink, metric=", stray: true"))
    _, ids, spans = agent_run()
    by_id = scored_spans(sink, collector, spans)
    root = span_ok(by_id[ids["root"]])
    assert root["eval.span_ok.error"] == "1 of its 3 span-level results name spans not in the trace: 5742a45742a45742"
    assert span_ok(by_id[ids["answer"]])["eval.span_ok.score"] == 1.0
