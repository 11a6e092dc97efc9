"""rag_metrics: faithfulness, context and answer relevance and tool_error, each on its own span.

Scores on a hand-made trace come from hand-chosen vectors (TableEmbedder), so each is
computed by hand below; the recorded LangChain RAG app and each convention's RAG trace
are scored with the static embedder, as the default config does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from spanscore.config.loader import ConfigError, load_config, parse_config
from spanscore.core.otlp_json import decode_request
from spanscore.processors.agent_trace.retrieval import MAX_DOCUMENT_CHARS, MAX_DOCUMENTS
from spanscore.processors.embedders.static import StaticEmbedder
from spanscore.processors.metrics.faithfulness import DEFAULT_THRESHOLD, MAX_CLAIMS, MAX_PASSAGES, read_context
from spanscore.processors.rag_metrics import (
    ANSWER_RELEVANCE,
    ANSWER_RELEVANCE_THRESHOLD,
    CONTEXT_RELEVANCE,
    CONTEXT_RELEVANCE_THRESHOLD,
    FAITHFULNESS,
    TOOL_ERROR,
    RagMetrics,
    RagMetricsConfig,
    passages_by_document,
)
from tests.fixtures.frameworks import docs_qa
from tests.fixtures.spans.rag import make_rag_fixtures as rag
from tests.support.agent_fixtures import SPANS_DIR
from tests.support.agent_spans import make_span
from tests.support.otlp_json import read_requests
from tests.support.rag_trace import (
    ANSWER,
    CHAIN,
    D_RETURNS,
    D_SHIPPING,
    LATER_DOCUMENT,
    LATER_QUERY,
    LLM,
    QUESTION,
    RETRIEVER,
    S_RETURNS,
    S_SHIPPING,
    TOOL,
    answer,
    documents,
    kind,
    rag_spans,
    traces_of,
)
from tests.support.spans import request_of
from tests.support.table_embedder import TableEmbedder

ROOT = Path(__file__).resolve().parents[2]
# The question along x; each cosine below is a dot product of these unit vectors.
TABLE = {
    QUESTION: [1.0, 0.0, 0.0],
    D_RETURNS: [0.6, 0.8, 0.0],  # cos with the question 0.6
    D_SHIPPING: [0.0, 1.0, 0.0],  # cos with the question 0
    S_RETURNS: [0.6, 0.8, 0.0],  # cos 1 with D_RETURNS, 0.6 with the question
    S_SHIPPING: [0.0, 0.6, 0.8],  # best passage D_SHIPPING, 0.6; cos 0 with the question
    LATER_QUERY: [0.0, 0.0, 1.0],
    LATER_DOCUMENT: [0.0, 0.0, 1.0],
}


def score(traces, embedder=None, config: RagMetricsConfig | None = None):
    processor = RagMetrics("rag_metrics", config or RagMetricsConfig())
    processor.held.embedder = embedder or StaticEmbedder()
    outputs = asyncio.run(processor.process_batch([(trace, None) for trace in traces]))
    for output in outputs:
        assert not isinstance(output, BaseException), output
    return outputs


def by_name(results) -> dict[str, list]:
    named: dict[str, list] = {}
    for result in results:
        named.setdefault(result.name, []).append(result)
    return named


def test_hand_computed_scores_each_on_its_span():
    root, first, model, later = rag_spans()
    embedder = TableEmbedder(TABLE)
    [results] = score(traces_of(request_of([root, first, model, later])), embedder)
    named = by_name(results)
    [faithful] = named[FAITHFULNESS]
    # S_RETURNS: cos 1 with D_RETURNS, its 30 held; S_SHIPPING: best 0.6 (D_SHIPPING). Mean 0.8.
    assert faithful.span_id == model.span_id.hex()
    assert faithful.score == pytest.approx(0.8)
    assert faithful.passed and faithful.metadata == {"documents": 2, "claims": 2, "unsupported": 0}
    # Per document its best passage's cosine with the query: 0.6 and 0, mean 0.3.
    first_relevance, later_relevance = sorted(named[CONTEXT_RELEVANCE], key=lambda r: r.span_id != first.span_id.hex())
    assert first_relevance.span_id == first.span_id.hex()
    assert first_relevance.score == pytest.approx(0.3)
    assert not first_relevance.passed and first_relevance.threshold == CONTEXT_RELEVANCE_THRESHOLD
    assert "1 of 2 documents relevant to the query; per document: 0.60, 0.00" == first_relevance.explanation
    assert later_relevance.span_id == later.span_id.hex() and later_relevance.score == pytest.approx(1.0)
    # Per answer sentence its cosine with the question: 0.6 and 0, mean 0.3.
    [relevant] = named[ANSWER_RELEVANCE]
    assert relevant.span_id == model.span_id.hex() and relevant.score == pytest.approx(0.3)
    assert relevant.threshold == ANSWER_RELEVANCE_THRESHOLD
    assert f'not about it: "{S_SHIPPING}"' in relevant.explanation
    # One embedding call for the trace, each text once; the later document is no context
    # of the model call (its faithfulness counted 2 documents) but is scored for relevance.
    assert len(embedder.calls) == 1
    assert sorted(embedder.calls[0]) == sorted(TABLE)


def test_a_batch_of_traces_is_embedded_in_one_call():
    one = rag_spans(bytes.fromhex("11" * 16))
    two = rag_spans(bytes.fromhex("22" * 16))
    embedder = TableEmbedder(TABLE)
    outputs = score(traces_of(request_of(list(one)), request_of(list(two))), embedder)
    assert [len(results) for results in outputs] == [4, 4]
    assert len(embedder.calls) == 1 and len(embedder.calls[0]) == len(TABLE)


def test_disabled_metrics_are_neither_declared_nor_scored():
    config = RagMetricsConfig.model_validate(
        {"context_relevance": {"enabled": False}, "tool_error": {"enabled": False}}
    )
    processor = RagMetrics("rag_metrics", config)
    assert processor.metric_names == (FAITHFULNESS, ANSWER_RELEVANCE)
    [results] = score(traces_of(request_of(list(rag_spans()))), TableEmbedder(TABLE), config)
    assert sorted(r.name for r in results) == [ANSWER_RELEVANCE, FAITHFULNESS]


def test_the_recorded_langchain_rag_runs_unfaithful_scores_lower_and_fails():
    traces = traces_of(*read_requests(SPANS_DIR / "frameworks" / "langchain_rag.jsonl"))
    outputs = score(traces)
    # The runs in the order they started: docs_qa's turns, the first faithful.
    assert [turn.faithful for turn in docs_qa.TURNS] == [True, False]
    faithful, unfaithful = (by_name(results)[FAITHFULNESS][0] for results in outputs)
    assert faithful.score > unfaithful.score
    # The threshold's figures on the labelled triples (docs/metrics.md) support a verdict.
    assert faithful.passed and not unfaithful.passed and unfaithful.threshold == DEFAULT_THRESHOLD
    assert '"2 minutes after its first span, and the trace is then dropped."' in unfaithful.explanation
    assert "not in any document: 2" in unfaithful.explanation


@pytest.mark.parametrize("name", sorted(rag.FIXTURES))
def test_each_convention_s_rag_trace_is_scored_on_its_spans(name):
    [trace] = traces_of(*read_requests(SPANS_DIR / "rag" / f"{name}.jsonl"))
    [results] = score([trace])
    named = by_name(results)
    spans = {span.name: span.span_id.hex() for span, _ in trace.spans()}
    llm_span = next(span_id for span_id in spans.values() if span_id.endswith("03"))
    retrieval_span = next(span_id for span_id in spans.values() if span_id.endswith("02"))
    [faithful] = named[FAITHFULNESS]
    # "14 days" where the policy says 30: no document holds 14.
    assert faithful.span_id == llm_span and faithful.score == 0.0 and not faithful.passed
    assert "not in any document: 14" in faithful.explanation and f'"{rag.ANSWER}"' in faithful.explanation
    [context] = named[CONTEXT_RELEVANCE]
    assert context.span_id == retrieval_span and 0.0 < context.score <= 1.0
    [relevant] = named[ANSWER_RELEVANCE]
    assert relevant.span_id == llm_span and relevant.passed
    assert TOOL_ERROR not in named


def test_a_trace_without_retrieval_gets_only_tool_error():
    traces = traces_of(decode_request((ROOT / "examples" / "weather-agent.json").read_bytes()))
    outputs = score(traces, TableEmbedder({}))  # embedding anything would raise KeyError
    for results in outputs:
        assert [(r.name, r.score, r.explanation) for r in results] == [
            (TOOL_ERROR, 1.0, "get_weather succeeded: its span states no error")
        ]


def test_the_default_config_scores_rag_and_leaves_the_weather_lines_as_they_are():
    config = load_config(str(ROOT / "otel-config.yaml"))
    [section] = [component.config for component in config.processors if component.id == "rag_metrics"]
    traces = traces_of(decode_request((ROOT / "examples" / "weather-agent.json").read_bytes()))
    assert score(traces, TableEmbedder({}), section) == [[], []]


def test_tool_error_names_the_failed_tool_and_the_rule():
    root = make_span("run", kind(CHAIN, **{"input.value": "weather?", "output.value": "sorry"}), start=0, end=100)
    ok = make_span("ok", kind(TOOL, **{"tool.name": "geocode"}), parent=root, start=1, end=2)
    broken = make_span(
        "broken", kind(TOOL, **{"tool.name": "get_weather"}), parent=root, start=3, end=4, error="upstream timed out"
    )
    limited = make_span(
        "limited",
        kind(TOOL, **{"tool.name": "search", "http.response.status_code": 429}),
        parent=root,
        start=5,
        end=6,
    )
    [results] = score(traces_of(request_of([root, ok, broken, limited])), TableEmbedder({}))
    found = {r.span_id: r for r in results}
    assert {name: r.name for name, r in found.items()} == {s.span_id.hex(): TOOL_ERROR for s in (ok, broken, limited)}
    assert found[ok.span_id.hex()].score == 1.0 and found[ok.span_id.hex()].metadata == {"tool": "geocode"}
    failed = found[broken.span_id.hex()]
    assert (failed.score, failed.label) == (0.0, "fail")
    assert failed.explanation == "get_weather failed (error_status, timeout): upstream timed out"
    assert failed.metadata == {"tool": "get_weather", "category": "timeout"}
    rate = found[limited.span_id.hex()]
    assert rate.score == 0.0 and rate.metadata == {"tool": "search", "category": "rate_limiting", "http_status": 429}
    assert rate.explanation == "search failed (error_status, rate_limiting): HTTP 429"


def test_an_llm_call_asking_only_for_tools_is_not_scored_for_faithfulness():
    root, first, _, _ = rag_spans()
    model = make_span(
        "chat",
        kind(
            LLM,
            **{
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
            },
        ),
        parent=root,
        start=70,
        end=80,
    )
    [results] = score(traces_of(request_of([root, first, model])), TableEmbedder(TABLE))
    assert FAITHFULNESS not in by_name(results)


def test_bounds_1000_documents_of_10_mb():
    # 20 retrievals of 50 documents of 10,000 characters: 1,000 documents, 10 MB.
    root = make_span("qa", kind(CHAIN, **{"input.value": QUESTION, "output.value": ANSWER}), start=0, end=10_000)
    text = ("Items can be returned within 30 days of delivery. " * 200)[:MAX_DOCUMENT_CHARS]
    retrievals = [
        make_span(
            f"retrieve{i}",
            kind(
                RETRIEVER, **{"input.value": QUESTION}, **documents(*[f"{i}-{d} {text}" for d in range(MAX_DOCUMENTS)])
            ),
            parent=root,
            start=10 + i,
            end=20 + i,
        )
        for i in range(20)
    ]
    long_answer = "Items can be returned within 30 days of delivery. " * 500
    model = make_span("chat", kind(LLM, **answer(long_answer)), parent=root, start=100, end=200)
    embedder = Counting()
    [results] = score(traces_of(request_of([root, *retrievals, model])), embedder)
    named = by_name(results)
    [faithful] = named[FAITHFULNESS]
    assert faithful.metadata["documents"] == 1_000 and faithful.metadata["claims"] == MAX_CLAIMS
    assert faithful.score == pytest.approx(1.0, abs=1e-5)  # each claim is a passage
    relevance = named[CONTEXT_RELEVANCE]
    assert len(relevance) == 20 and all(r.metadata["documents"] == MAX_DOCUMENTS for r in relevance)
    # The claims, the question, and per retrieval (and for the model call's context) at
    # most MAX_PASSAGES passages: not the 200,000 sentences of the documents.
    assert embedder.texts <= MAX_CLAIMS + 1 + 21 * MAX_PASSAGES


class Counting(StaticEmbedder):
    texts = 0

    def embed_sync(self, texts):
        self.texts += len(texts)
        return super().embed_sync(texts)


def rag_config(text: str) -> RagMetricsConfig:
    return RagMetricsConfig.model_validate(yaml.safe_load(text))


def test_each_metric_s_spans_are_of_its_own_kind_and_another_on_is_an_error_at_its_key():
    config = RagMetricsConfig()
    kinds = [config.settings(name).on for name in (FAITHFULNESS, CONTEXT_RELEVANCE, ANSWER_RELEVANCE, TOOL_ERROR)]
    assert kinds == ["llm", "retrieval", "llm", "tool"]
    assert rag_config("faithfulness: {on: llm}").faithfulness.on == "llm"  # its own kind, written out
    text = """
receivers: {otlp: {protocols: {grpc: {endpoint: 127.0.0.1:0}}}}
processors:
  rag_metrics: {faithfulness: {on: tool, sample_ratio: 0.5}, tool_error: {on: session}}
exporters: {debug: {}}
service: {pipelines: {traces: {receivers: [otlp], processors: [rag_metrics], exporters: [debug]}}}
"""
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    assert raised.value.problems == [
        "processors.rag_metrics.faithfulness.on: this metric scores llm spans only: leave on out, "
        "narrow them with where and sample_ratio (got 'tool')",
        "processors.rag_metrics.tool_error.on: this metric scores tool spans only: leave on out, "
        "narrow them with where and sample_ratio (got 'session')",
    ]


def test_where_and_sample_ratio_narrow_each_metric_to_the_spans_they_choose():
    root, first, model, later = rag_spans()
    [trace] = traces_of(request_of([root, first, model, later]))
    chosen = rag_config("{context_relevance: {where: {span_names: [retrieve_more]}}, faithfulness: {sample_ratio: 0}}")
    [results] = score([trace], TableEmbedder(TABLE), chosen)
    named = by_name(results)
    assert [r.span_id for r in named[CONTEXT_RELEVANCE]] == [later.span_id.hex()]
    assert FAITHFULNESS not in named
    assert [r.span_id for r in named[ANSWER_RELEVANCE]] == [model.span_id.hex()]
    # answer_relevance scores the final answer's span only when where chooses it
    [results] = score([trace], TableEmbedder(TABLE), rag_config("answer_relevance: {where: {span_names: [other]}}"))
    assert ANSWER_RELEVANCE not in by_name(results)


def test_where_narrows_tool_error_to_the_tools_it_names():
    traces = traces_of(decode_request((ROOT / "examples" / "weather-agent.json").read_bytes()))
    kept = score(traces, TableEmbedder({}), rag_config("tool_error: {where: {span_names: [execute_tool get_weather]}}"))
    assert all([r.name for r in results] == [TOOL_ERROR] for results in kept)
    dropped = score(traces, TableEmbedder({}), rag_config("tool_error: {where: {span_names: [other]}}"))
    assert all(results == [] for results in dropped)


def test_which_spans_are_scored_is_no_part_of_a_metric_s_revision():
    plain = RagMetrics("rag_metrics", rag_config("{}"))
    narrowed = RagMetrics(
        "rag_metrics",
        rag_config(
            "{faithfulness: {where: {span_names: [x]}, sample_ratio: 0.5}, tool_error: {where: {span_names: [y]}}}"
        ),
    )
    stricter = RagMetrics("rag_metrics", rag_config("{faithfulness: {threshold: 0.9}}"))
    for name in (FAITHFULNESS, TOOL_ERROR):
        assert narrowed.provenance(name) == plain.provenance(name)
    assert stricter.provenance(FAITHFULNESS).revision != plain.provenance(FAITHFULNESS).revision


def test_passages_by_document_from_a_context_read_already_are_those_read_anew():
    documents = ["Oslo had rain. It was 14 degrees.", "", "Bergen stayed dry; wind from the west.\nNo snow."]
    context = read_context("An answer. With claims.", documents, question="Where did it rain?")
    assert passages_by_document(documents, context) == passages_by_document(documents)
    assert passages_by_document(documents) == [
        ("Oslo had rain.", "It was 14 degrees."),
        ("Bergen stayed dry;", "wind from the west.", "No snow."),
    ]
