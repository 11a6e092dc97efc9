"""checks end to end: an agent run sent by a real OTLP client over loopback into a running
collector, the exported OTLP read by span id: each span-level check on the span it names
(with its evaluation event and provenance), the trace-level checks and each metric's
roll-up on the root, nothing on the spans a check does not target."""

from __future__ import annotations

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.agent_spans import make_span
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import evaluation_events, new_span_id, new_trace_id, request_of

SECOND = 1_000_000_000


def config(sink) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
  checks:
    metrics:
      no_refund: {{field: output, not_regex: "(?i)refund"}}
      json_answers: {{on: llm, field: output, json_schema: {{type: object, required: [answer]}}}}
      fast_tools: {{on: tool, max_duration: 2s}}
      short_calls: {{on: llm, max_tokens: 800}}
      no_secrets: {{field: output, no_pii: true}}
      tool_errors: {{tool_error_rate: {{max: 0.2}}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, checks], exporters: [otlp]}}
"""


def agent_run():
    """(span id by name, spans): a root answering with a refund promise and an e-mail
    address, two model calls (one answering in JSON within 800 tokens, one in prose over
    them), a tool that took 2.5 s and one that failed."""
    trace_id = new_trace_id()
    ids = {name: new_span_id() for name in ("root", "plan", "answer", "search", "lookup")}

    def span(name, attributes, start, end, error=None):
        parent = None if name == "root" else ids["root"]
        return make_span(
            name, attributes, id=ids[name], parent=parent, start=start, end=end, trace_id=trace_id, error=error
        )

    def llm(text, prompt_tokens, completion_tokens):
        return {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Can I get my money back?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": text,
            "llm.token_count.prompt": prompt_tokens,
            "llm.token_count.completion": completion_tokens,
        }

    output = "We will refund you in full; write to help@example.com"
    spans = [
        span("root", {"openinference.span.kind": "CHAIN", "input.value": "Can I get my money back?",
                      "output.value": output}, 0, 3 * SECOND),
        span("plan", llm("I will search the policy first.", 700, 300), 100, 200),
        span("answer", llm('{"answer": "yes"}', 500, 100), 3_000_000, 4_000_000),
        span("search", {"openinference.span.kind": "TOOL", "tool.name": "search", "input.value": '{"q": "refund"}',
                        "output.value": "policy: 30 days"}, 300, 300 + 5 * SECOND // 2),
        span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": '{"order": 7}'},
             400, 500, error="order service timed out"),
    ]  # fmt: skip
    return ids, spans


def eval_attributes(span, metric: str) -> dict:
    prefix = f"eval.{metric}."
    return {k[len(prefix) :]: v for k, v in attributes_to_dict(span.attributes).items() if k.startswith(prefix)}


def test_each_check_is_on_the_span_it_names_and_rolled_up_on_the_root(sink, start_collector):
    collector = start_collector(config(sink))
    ids, spans = agent_run()
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) >= len(spans), timeout_s=15)
    by_name = {name: next(s for s in sink.spans() if s.span_id == span_id) for name, span_id in ids.items()}

    def on(name, metric):
        return eval_attributes(by_name[name], metric)

    # Span-level checks: each on its span, with its event and provenance.
    assert (on("answer", "json_answers")["score"], on("answer", "json_answers")["label"]) == (1.0, "pass")
    plan = on("plan", "json_answers")
    assert (plan["score"], plan["label"]) == (0.0, "fail")
    assert plan["explanation"] == "output is not JSON: Expecting value: line 1 column 1 (char 0)"
    assert plan["evaluator"] == "code" and len(plan["revision"]) == 12
    [event] = [e for e in evaluation_events(by_name["plan"]) if e["gen_ai.evaluation.name"] == "json_answers"]
    assert (event["gen_ai.evaluation.score.value"], event["gen_ai.evaluation.score.label"]) == (0.0, "fail")
    assert on("plan", "short_calls")["explanation"] == "the model call used 1,000 tokens, over the max 800"
    assert on("answer", "short_calls")["explanation"] == "the model call used 600 tokens, within the max 800"
    assert on("search", "fast_tools")["explanation"] == "the span took 2.5s, over the max 2s"
    assert on("lookup", "fast_tools")["label"] == "pass"
    for tool in ("search", "lookup"):  # llm checks leave tool spans alone, and the other way round
        assert on(tool, "json_answers") == {} and on(tool, "short_calls") == {}
    for call in ("plan", "answer"):
        assert on(call, "fast_tools") == {}

    # On the root: the trace-level checks, and each span-level metric's roll-up.
    assert on("root", "no_refund")["explanation"] == "output matches /(?i)refund/ at character 8: refund"
    assert on("root", "no_refund")["label"] == "fail"
    assert on("root", "no_secrets")["explanation"] == "output holds 1 e-mail address"
    assert "help@" not in str(on("root", "no_secrets"))  # the kind found, never the address
    tool_errors = on("root", "tool_errors")
    assert (tool_errors["score"], tool_errors["explanation"]) == (
        0.0, "1 of 2 tool calls failed (50%), over the max 20%: lookup"
    )  # fmt: skip
    json_rollup = on("root", "json_answers")
    assert (json_rollup["spans"], json_rollup["failing"], json_rollup["min"]) == (2, 1, 0.0)
    fast_rollup = on("root", "fast_tools")
    assert (fast_rollup["spans"], fast_rollup["failing"]) == (2, 1)


# In worker processes too: a session's turns all go to one worker, which keeps their parts.
@pytest.mark.parametrize("workers", ["", ", scoring_workers: 2"], ids=["in_process", "two_workers"])
def test_session_checks_go_on_the_session_s_carrier_when_it_closes(sink, start_collector, workers):
    text = config(sink).replace("trace_wait: 20ms", f"trace_wait: 20ms, session_idle: 400ms{workers}")
    session_checks = """      session_refund: {on: session, field: output, not_regex: "(?i)refund"}
      session_tokens: {on: session, max_tokens: 2500}
      session_tools: {on: session, tool_error_rate: {max: 0.2}}
      session_time: {on: session, max_duration: 5s}
exporters:"""
    collector = start_collector(text.replace("exporters:", session_checks, 1))
    # Two turns of session s-1: the agent run above (a refund promised, 1,600 tokens, one
    # of two tools failed, 0 to 3 s), then a polite turn (400 tokens, one tool, 4 to 5.5 s).
    _, first = agent_run()
    trace_id, root_id = new_trace_id(), new_span_id()
    second = [
        make_span("root", {"openinference.span.kind": "CHAIN", "input.value": "Thanks", "output.value": "Welcome."},
                  id=root_id, trace_id=trace_id, start=4 * SECOND, end=11 * SECOND // 2),
        make_span("answer", {"openinference.span.kind": "LLM", "llm.token_count.total": 400}, parent=root_id,
                  trace_id=trace_id, start=4 * SECOND + 1, end=4 * SECOND + 2),
        make_span("search", {"openinference.span.kind": "TOOL", "tool.name": "search", "input.value": "{}"},
                  parent=root_id, trace_id=trace_id, start=4 * SECOND + 3, end=4 * SECOND + 4),
    ]  # fmt: skip
    for spans in (first, second):
        spans[0].attributes.add(key="session.id").value.string_value = "s-1"
        send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: any(s.name == "evaluate_session" for s in sink.spans()), timeout_s=30)
    [carrier] = [s for s in sink.spans() if s.name == "evaluate_session"]

    def on_carrier(metric):
        return eval_attributes(carrier, metric)

    assert on_carrier("session_refund")["explanation"] == (
        "1 of the 2 turns recording output fail; turn 1: output matches /(?i)refund/ at character 8: refund"
    )
    assert on_carrier("session_refund")["evaluator"] == "code"
    # 700 + 300 + 500 + 100 in the first turn, 400 in the second.
    assert on_carrier("session_tokens")["explanation"] == (
        "the session's 3 model calls used 2,000 tokens, within the max 2,500"
    )
    assert on_carrier("session_tools")["explanation"] == (
        "1 of 3 tool calls in the session failed (33%), over the max 20%: lookup"
    )
    assert on_carrier("session_time")["explanation"] == (
        "the session's 2 traces took 5.5s from the first start to the last end, over the max 5s"
    )
    assert [on_carrier(m)["label"] for m in ("session_refund", "session_tokens", "session_tools", "session_time")] == [
        "fail", "pass", "fail", "fail"
    ]  # fmt: skip
    for span in sink.spans():  # the traces carry their own checks, none of the session's
        if span is not carrier:
            assert not any(key.startswith("eval.session_") for key in attributes_to_dict(span.attributes))
