"""A judge metric the trace gives nothing to judge is skipped, not scored, end to end:
spans in over OTLP, the loopback OpenAI-protocol server as the judge counting the
requests it got by the answer schema each asked for, the exported root span read back.
A retrieval-augmented run offers and calls no tools: no tool_correctness or
argument_correctness request, no score, `eval.<metric>.skipped` saying why; the
weather agent's run, which called a tool, is still judged on both."""

from __future__ import annotations

from collections import Counter

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.judge_metrics.rubrics import NO_TOOL_CALLS, NO_TOOLS
from tests.support.agent_fixtures import SPANS_DIR
from tests.support.judge_answers import schema_judge, schema_of
from tests.support.openai_server import OpenAIServer
from tests.support.otlp_client import grpc_export
from tests.support.otlp_json import read_requests
from tests.support.running import sink_config, wait_until
from tests.support.spans import evaluation_events


@pytest.fixture
def judge_server():
    with OpenAIServer(handler=schema_judge(score=0.8)) as server:
        yield server


def judged_roots(judge_server, sink, start_collector, fixture: str, roots: int) -> list[dict]:
    """The root spans of the runs in `fixture` once judged, each as its attributes."""
    judge = f"{{model: judge-test, base_url: '{judge_server.base_url}', api_key: test-key, max_retries: 1}}"
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, judge_metrics]",
            extra_processors=f"  judge_metrics: {{judge: {judge}}}",
            assembler="trace_wait: 50ms",
        )
    )
    for request in read_requests(fixture):
        grpc_export(collector.grpc_port, request.SerializeToString())

    def scored_roots():
        return [
            s for s in sink.spans() if not s.parent_span_id and "eval.judge.calls" in attributes_to_dict(s.attributes)
        ]

    assert wait_until(lambda: len(scored_roots()) >= roots, timeout_s=20)
    return scored_roots()


def requests_by_metric(judge_server) -> Counter:
    return Counter(schema_of(request)[0] for request in judge_server.requests_to("/chat/completions"))


def test_a_run_without_tools_gets_no_tool_judge_call_and_no_tool_score(judge_server, sink, start_collector):
    roots = judged_roots(judge_server, sink, start_collector, SPANS_DIR / "frameworks" / "langchain_rag.jsonl", 2)
    asked = requests_by_metric(judge_server)
    assert asked["tool_correctness"] == 0 and asked["argument_correctness"] == 0
    assert asked["task_completion"] == 2 and asked["extract"] == 2  # the other metrics are judged
    for root in roots:
        attributes = attributes_to_dict(root.attributes)
        assert attributes["eval.tool_correctness.skipped"] == NO_TOOLS
        assert attributes["eval.argument_correctness.skipped"] == NO_TOOL_CALLS
        for metric in ("tool_correctness", "argument_correctness"):
            assert not {key for key in attributes if key.startswith(f"eval.{metric}.")} - {f"eval.{metric}.skipped"}
        named = {event["gen_ai.evaluation.name"] for event in evaluation_events(root)}
        assert "task_completion" in named and not named & {"tool_correctness", "argument_correctness"}
        # the calls the root counts are the ones the server received, none for the skipped metrics
        assert attributes["eval.judge.calls"] == sum(asked.values()) / 2


def test_a_run_that_called_a_tool_is_still_judged_on_its_tools(judge_server, sink, start_collector):
    [root] = judged_roots(judge_server, sink, start_collector, SPANS_DIR / "openinference.jsonl", 1)
    asked = requests_by_metric(judge_server)
    assert asked["tool_correctness"] == 1 and asked["argument_correctness"] == 1
    attributes = attributes_to_dict(root.attributes)
    assert attributes["eval.tool_correctness.score"] == 0.8
    assert attributes["eval.argument_correctness.score"] == 1.0
    assert "eval.tool_correctness.skipped" not in attributes
