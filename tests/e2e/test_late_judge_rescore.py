"""Late spans re-score the judge metrics too, over OTLP with a loopback OpenAI server as
the judge: the tool server's failing span, arriving after the trace was scored, reaches
the judge in the re-score's prompt, and the judge's verdict on the carrier (sequence 2)
differs from the root's (sequence 1). The judge's scores show the plumbing only: the
loopback judge answers 0.2 when the prompt shows the tool's 429, else 0.9."""

from __future__ import annotations

import json

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.failing_run import run_spans
from tests.support.judge_answers import answer_for, schema_of
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import request_of

JUDGED = ("task_completion", "confidence")


def judge_seeing_the_failure(request: RecordedRequest) -> Reply:
    _, schema = schema_of(request)
    prompt = request.messages()[-1]["content"]
    score = 0.2 if "429" in prompt else 0.9
    return Reply(content=json.dumps(answer_for(schema, score)))


@pytest.fixture
def judge_server():
    with OpenAIServer(handler=judge_seeing_the_failure) as server:
        yield server


def config(sink, judge: OpenAIServer) -> str:
    off = ", ".join(
        f"{name}: {{enabled: false}}"
        for name in ("tool_correctness", "argument_correctness", "plan_adherence", "plan_quality", "step_efficiency")
    )
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 50ms, late_window: 1m}}
  judge_metrics:
    judge: {{model: judge-test, base_url: '{judge.base_url}', api_key: k, max_retries: 1}}
    metrics: {{{off}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, judge_metrics], exporters: [otlp]}}
"""


def test_a_late_failing_tool_span_changes_the_judges_verdict_on_the_carrier(judge_server, sink, start_collector):
    collector = start_collector(config(sink, judge_server))
    trace_id, ids, spans = run_spans(failing=True)
    send(collector.grpc_port, request_of([spans[0], spans[1], spans[4]]))  # the agent's spans
    assert wait_until(lambda: len(sink.spans()) == 3)
    first_calls = len(judge_server.requests_to("/chat/completions"))
    send(collector.grpc_port, request_of([spans[2], spans[3]]))  # the tool server's, late
    assert wait_until(lambda: any(s.name == "evaluate_trace" for s in sink.spans()))

    spans_out = sink.spans()
    assert len({s.span_id for s in spans_out}) == len(spans_out) == 6  # each span once, the carrier new
    root = attributes_to_dict(next(s for s in spans_out if s.span_id == ids["root"]).attributes)
    [carrier] = [attributes_to_dict(s.attributes) for s in spans_out if s.name == "evaluate_trace"]
    for name in JUDGED:
        assert (root[f"eval.{name}.score"], root[f"eval.{name}.sequence"]) == (0.9, 1), name
        assert (carrier[f"eval.{name}.score"], carrier[f"eval.{name}.sequence"]) == (0.2, 2), name
        assert (root[f"eval.{name}.label"], carrier[f"eval.{name}.label"]) == ("pass", "fail"), name
    # The re-score asked the judge again, and its prompts carried the late tool span.
    later = judge_server.requests_to("/chat/completions")[first_calls:]
    assert later and all("429" in request.messages()[-1]["content"] for request in later)
    assert carrier["eval.judge.calls"] == len(later)
