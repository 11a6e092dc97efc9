"""rag_metrics judged end to end: a RAG trace sent by a real OTLP client over loopback, a
real loopback server speaking the OpenAI protocol as the judge, the results read back by
span id from the exported spans. The judge's answers are scripted: the scores below show
the plumbing (prompt out, answer in, score on the right span), not any judge's quality."""

from __future__ import annotations

import pytest

from spanscore.core.attributes import attributes_to_dict
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import ErrorReply, OpenAIServer, Reply
from tests.support.otlp_client import send
from tests.support.rag_trace import D_RETURNS, D_SHIPPING, LATER_DOCUMENT, rag_spans
from tests.support.running import sink_config, wait_until
from tests.support.spans import request_of

MODEL = "judge-test"
CLAIMS = {
    "claims": [
        {"claim": "Returns are accepted for 30 days.", "reason": "", "supported": True},
        {"claim": "Shipping is fast.", "reason": "no document says how fast shipping is", "supported": False},
    ]
}
# Fixed answers: the later retrieval has one document, so its answer's document_2 is
# dropped as a key its schema does not have.
RELEVANCE = {
    "document_1": {"reason": "gives the return window", "relevant": True},
    "document_2": {"reason": "about shipping, not returns", "relevant": False},
}
ANSWERED = {"reason": "gives the return window, then talks about shipping", "score": 0.75}
SCRIPT = {"rag_faithfulness": CLAIMS, "rag_context_relevance": RELEVANCE, "rag_answer_relevance": ANSWERED}


def config(sink, server: OpenAIServer, judge: str = "") -> str:
    rag = (
        f"  rag_metrics: {{judge: {{model: {MODEL}, base_url: '{server.base_url}', api_key: test-key, "
        f"max_retries: 1, initial_backoff: 10ms, max_backoff: 20ms{judge}}}}}"
    )
    return sink_config(sink, processors="[assembler, rag_metrics]", extra_processors=rag, assembler="trace_wait: 50ms")


def scored(sink, collector) -> dict[bytes, dict]:
    """Each exported span's attributes and its evaluation events' attributes, by span id."""
    root, first, model, later = spans = rag_spans()
    send(collector.grpc_port, request_of(list(spans)))
    assert wait_until(lambda: len(sink.spans()) == 4, timeout_s=15)
    by_id = {span.span_id: span for span in sink.spans()}
    return {
        name: {
            "attributes": attributes_to_dict(by_id[span.span_id].attributes),
            "events": {
                attributes_to_dict(e.attributes)["gen_ai.evaluation.name"]: attributes_to_dict(e.attributes)
                for e in by_id[span.span_id].events
            },
        }
        for name, span in (("root", root), ("first", first), ("model", model), ("later", later))
    }


def test_the_judge_scores_each_span_and_its_spend_is_on_the_root(sink, start_collector):
    with OpenAIServer(handler=schema_judge(overrides=SCRIPT)) as server:
        collector = start_collector(config(sink, server))
        spans = scored(sink, collector)
        requests = server.requests_to("/chat/completions")
    model = spans["model"]["attributes"]
    # 2 claims, 1 unsupported: 0.5, failing at 0.55; the unsupported claim quoted with why.
    assert model["eval.faithfulness.score"] == 0.5
    assert model["eval.faithfulness.label"] == "fail"
    assert model["eval.faithfulness.evaluator"] == MODEL
    assert model["eval.faithfulness.explanation"] == (
        '1 of 2 claims of the answer supported by the context; unsupported: "Shipping is fast." '
        "(no document says how fast shipping is)"
    )
    assert model["eval.answer_relevance.score"] == 0.75
    assert model["eval.answer_relevance.evaluator"] == MODEL
    first, later = spans["first"]["attributes"], spans["later"]["attributes"]
    assert first["eval.context_relevance.score"] == 0.5 and first["eval.context_relevance.label"] == "pass"
    assert first["eval.context_relevance.explanation"] == (
        "1 of 2 documents relevant to the query; not relevant: document 2 (about shipping, not returns)"
    )
    assert first["eval.context_relevance.evaluator"] == MODEL
    assert later["eval.context_relevance.score"] == 1.0
    # Nothing about a span lands on another: the retrievals carry no answer metrics.
    assert not any(key.startswith(("eval.faithfulness", "eval.answer_relevance")) for key in first)
    # The spend of the 4 calls (the loopback server reports 120 + 30 tokens a reply) on the root.
    root = spans["root"]["attributes"]
    assert len(requests) == 4
    assert (root["eval.judge.calls"], root["eval.judge.input_tokens"], root["eval.judge.output_tokens"]) == (
        4,
        480,
        120,
    )
    # What the judge was asked: the model call's context inside the delimiters, not the later retrieval's.
    [faithfulness] = [r for r in requests if r.body["response_format"]["json_schema"]["name"] == "rag_faithfulness"]
    prompt = faithfulness.messages()[-1]["content"]
    block = prompt.split("<trace_data>\n", 1)[1].split("\n</trace_data>", 1)[0]
    assert D_RETURNS in block and D_SHIPPING in block and LATER_DOCUMENT not in prompt
    assert faithfulness.body["model"] == MODEL


@pytest.mark.parametrize(
    "answer, error_type, message",
    [
        (ErrorReply(500, "down"), "judge_unavailable", "HTTP 500: Error code: 500 - down"),
        (
            Reply(content="no JSON here", prompt_tokens=120, completion_tokens=30),
            "malformed_answer",
            "malformed answer",
        ),
    ],
)
def test_a_judge_failure_is_an_error_on_each_span_with_its_type(answer, error_type, message, sink, start_collector):
    with OpenAIServer(handler=lambda request: answer) as server:
        collector = start_collector(config(sink, server, judge=", max_judge_wait: 500ms"))
        spans = scored(sink, collector)
        requests = len(server.requests_to("/chat/completions"))
    for span, metric in (("model", "faithfulness"), ("model", "answer_relevance"), ("first", "context_relevance")):
        attributes = spans[span]["attributes"]
        assert f"eval.{metric}.score" not in attributes
        assert message in attributes[f"eval.{metric}.error"]
        assert attributes[f"eval.{metric}.evaluator"] == MODEL  # the judge failed: the embedder did not stand in
        assert spans[span]["events"][metric]["error.type"] == error_type
    # Every request spent, retries and the failed ones included, is counted.
    assert requests >= 4 and spans["root"]["attributes"]["eval.judge.calls"] == requests


def test_past_the_judge_s_budget_the_spans_left_are_skipped_not_failed(sink, start_collector):
    with OpenAIServer(handler=schema_judge(overrides=SCRIPT)) as server:
        collector = start_collector(config(sink, server, judge=", budget: {requests_per_hour: 2}"))
        spans = scored(sink, collector)
        requests = len(server.requests_to("/chat/completions"))
    # 4 calls wanted, 2 allowed: 2 spans' metrics scored, the other 2 skipped, none failed.
    scored_results = [
        (span, metric)
        for span in ("model", "first", "later")
        for metric in ("faithfulness", "context_relevance", "answer_relevance")
        if f"eval.{metric}.score" in spans[span]["attributes"]
    ]
    root = spans["root"]["attributes"]
    skips = {key: value for key, value in root.items() if key.endswith(".skipped")}
    not_judged = sum(int(value.split(" span")[0]) for value in skips.values())
    assert requests == root["eval.judge.calls"] == 2 and len(scored_results) == 2 and not_judged == 2
    assert all("budget" in value for value in skips.values()), skips
    assert not any(key.endswith(".error") for span in spans.values() for key in span["attributes"])
