"""rag_metrics narrowed by `where` and `sample_ratio` end to end: a RAG run sent by a real
OTLP client over loopback into a running collector; the exported OTLP checked by span id:
each chosen model call scored on its span, nothing on the calls left out, the roll-up on
the root counting only the chosen ones; `sample_ratio` picks the same spans on every run."""

from __future__ import annotations

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.sampling import span_sampled
from tests.support.agent_spans import make_span
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import evaluation_events, new_span_id, new_trace_id, request_of

QUESTION = "How long can I return items?"
DOCUMENT = "Items can be returned within 30 days of delivery."
ANSWER = "Items can be returned within 30 days of delivery."


def config(sink, rag: str) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
  assembler: {{trace_wait: 20ms}}
  rag_metrics: {rag}
exporters:
  otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}}}
service:
  pipelines:
    traces: {{receivers: [otlp], processors: [assembler, rag_metrics], exporters: [otlp]}}
"""


def llm(name: str, span_id: bytes, root: bytes, start: int, trace_id: bytes):
    return make_span(
        name,
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": QUESTION,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
        },
        id=span_id,
        parent=root,
        start=start,
        end=start + 50,
        trace_id=trace_id,
    )


def rag_run(calls: int = 3):
    """(trace id, span id by name, spans): a retrieval, then `calls` model calls named
    `draft 0..`, the last `answer`, each answering from the retrieved document."""
    trace_id = new_trace_id()
    names = ["root", "retrieve", *(f"draft {i}" for i in range(calls - 1)), "answer"]
    ids = {name: new_span_id() for name in names}
    root = make_span(
        "qa",
        {"openinference.span.kind": "CHAIN", "input.value": QUESTION, "output.value": ANSWER},
        id=ids["root"],
        start=0,
        end=100_000,
        trace_id=trace_id,
    )
    retrieve = make_span(
        "retrieve",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": QUESTION,
            "retrieval.documents.0.document.content": DOCUMENT,
        },
        id=ids["retrieve"],
        parent=ids["root"],
        start=10,
        end=60,
        trace_id=trace_id,
    )
    models = [llm(name, ids[name], ids["root"], 100 + 100 * i, trace_id) for i, name in enumerate(names[2:])]
    return trace_id, ids, [root, retrieve, *models]


def exported(sink, collector, spans, runs: int = 1) -> dict:
    """The exported spans by id (of an id sent `runs` times, the last), once all arrived."""
    send(collector.grpc_port, request_of(spans))
    assert wait_until(lambda: len(sink.spans()) >= runs * len(spans), timeout_s=15)
    return {span.span_id: span for span in sink.spans()}


def eval_attributes(span, metric: str) -> dict:
    prefix = f"eval.{metric}."
    return {k: v for k, v in attributes_to_dict(span.attributes).items() if k.startswith(prefix)}


def events_of(span, metric: str) -> list[dict]:
    return [e for e in evaluation_events(span) if e["gen_ai.evaluation.name"] == metric]


def test_where_scores_only_the_matching_model_calls_and_rolls_up_those(sink, start_collector):
    collector = start_collector(config(sink, "{faithfulness: {where: {span_names: [answer, draft 0]}}}"))
    _, ids, spans = rag_run(calls=3)  # draft 0, draft 1, answer
    by_id = exported(sink, collector, spans)
    for name in ("draft 0", "answer"):
        scored = eval_attributes(by_id[ids[name]], "faithfulness")
        assert scored["eval.faithfulness.score"] == pytest.approx(1.0), name  # the answer is the document
        assert scored["eval.faithfulness.label"] == "pass"
        [event] = events_of(by_id[ids[name]], "faithfulness")
        assert event["gen_ai.evaluation.score.value"] == pytest.approx(1.0)
    left_out = by_id[ids["draft 1"]]
    assert eval_attributes(left_out, "faithfulness") == {} and events_of(left_out, "faithfulness") == []
    root = eval_attributes(by_id[ids["root"]], "faithfulness")
    assert (root["eval.faithfulness.spans"], root["eval.faithfulness.failing"]) == (2, 0)
    assert root["eval.faithfulness.min"] == pytest.approx(1.0)
    # The other metrics keep all their spans: answer_relevance on the final answer, context_relevance on the retrieval.
    assert "eval.answer_relevance.score" in eval_attributes(by_id[ids["answer"]], "answer_relevance")
    assert "eval.context_relevance.score" in eval_attributes(by_id[ids["retrieve"]], "context_relevance")


def test_answer_relevance_left_out_when_where_does_not_choose_the_final_answer(sink, start_collector):
    collector = start_collector(config(sink, "{answer_relevance: {where: {span_names: [draft 0]}}}"))
    _, ids, spans = rag_run(calls=2)
    by_id = exported(sink, collector, spans)
    for span in by_id.values():
        assert eval_attributes(span, "answer_relevance") == {}
    assert eval_attributes(by_id[ids["answer"]], "faithfulness")["eval.faithfulness.label"] == "pass"


def test_sample_ratio_zero_scores_no_span(sink, start_collector):
    collector = start_collector(config(sink, "{faithfulness: {sample_ratio: 0}, context_relevance: {sample_ratio: 0}}"))
    _, ids, spans = rag_run(calls=3)
    by_id = exported(sink, collector, spans)
    for span in by_id.values():
        assert eval_attributes(span, "faithfulness") == {} and events_of(span, "faithfulness") == []
        assert eval_attributes(span, "context_relevance") == {}
    assert "eval.answer_relevance.score" in eval_attributes(by_id[ids["answer"]], "answer_relevance")


def test_sample_ratio_picks_the_same_spans_on_every_run(sink, start_collector):
    _, ids, spans = rag_run(calls=40)
    trace_id = spans[0].trace_id
    expected = {span.span_id for span in spans[2:] if span_sampled(trace_id, span.span_id, 0.5)}
    assert 0 < len(expected) < 40  # a share, neither none nor all
    picked = []
    for run in (1, 2):  # two collectors, as two replicas or a re-run
        collector = start_collector(config(sink, "{faithfulness: {sample_ratio: 0.5}}"))
        by_id = exported(sink, collector, spans, runs=run)
        picked.append(
            {span_id for span_id, span in by_id.items() if eval_attributes(span, "faithfulness")} - {ids["root"]}
        )
        root = eval_attributes(by_id[ids["root"]], "faithfulness")
        assert root["eval.faithfulness.spans"] == len(expected)
        collector.stop()
    assert picked[0] == picked[1] == expected
