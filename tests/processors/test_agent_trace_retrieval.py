"""Retrieval steps: the hand-written RAG trace of each convention (tests/fixtures/spans/rag,
see make_rag_fixtures.py for the specifications followed), rerankers, nesting, and the
bounds on documents."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.processors.agent_trace import build_agent_trace
from spanscore.processors.agent_trace.build import read_span_views, summarize
from spanscore.processors.agent_trace.retrieval import MAX_DOCUMENT_CHARS, MAX_DOCUMENTS, MAX_METADATA_CHARS
from tests.fixtures.frameworks import docs_qa
from tests.fixtures.spans.rag import make_rag_fixtures as rag
from tests.support.agent_fixtures import SPANS_DIR, load_spans, load_trace
from tests.support.agent_spans import TRACE_ID, make_span, with_resource
from tests.support.fuzz_strategies import json_values
from tests.support.otlp_json import read_requests, spans_by_trace

RAG_DIR = SPANS_DIR / "rag"
CONVENTIONS = sorted(rag.FIXTURES)


def build(*spans):
    return build_agent_trace(TRACE_ID, with_resource(*spans))


def test_the_fixtures_are_what_their_generator_writes():
    for path, text in rag.texts().items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale; run make_rag_fixtures.py"


@pytest.mark.parametrize("name", CONVENTIONS)
def test_each_convention_s_rag_trace_has_its_retrieval_and_documents(name):
    trace = load_trace(name, RAG_DIR)
    assert trace.recognized
    assert (trace.user_input, trace.final_output) == (rag.QUESTION, rag.ANSWER)
    assert [step.kind for step in trace.steps] == ["retrieval", "llm"]
    [retrieval] = trace.retrieval_steps
    assert retrieval.document_count == 2
    assert [(d.id, d.content, d.content_chars) for d in retrieval.documents] == [
        ("policy-returns", rag.RETURNS, len(rag.RETURNS)),
        ("policy-shipping", rag.SHIPPING, len(rag.SHIPPING)),
    ]
    assert retrieval.end_time_unix_nano <= trace.llm_steps[0].start_time_unix_nano
    assert trace.llm_steps[0].result == rag.ANSWER


@pytest.mark.parametrize("name", ["openinference", "genai", "langfuse"])
def test_the_query_is_read_where_the_convention_records_it(name):
    assert load_trace(name, RAG_DIR).retrieval_steps[0].query == rag.QUESTION


def test_scores_and_metadata_as_each_convention_records_them():
    openinference = load_trace("openinference", RAG_DIR).retrieval_steps[0]
    assert [(d.score, d.metadata) for d in openinference.documents] == [
        (0.89, {"source": "policies/returns.md"}),
        (0.42, {"source": "policies/shipping.md"}),
    ]
    assert [d.score for d in load_trace("genai", RAG_DIR).retrieval_steps[0].documents] == [0.89, 0.42]
    langfuse = load_trace("langfuse", RAG_DIR).retrieval_steps[0]
    assert [d.metadata for d in langfuse.documents] == [
        {"source": "policies/returns.md"},
        {"source": "policies/shipping.md"},
    ]
    # Chroma records a distance (lower is closer), not a score: kept beside the metadata.
    chroma = load_trace("openllmetry", RAG_DIR).retrieval_steps[0]
    assert chroma.query is None  # the instrumentation records only how many query texts
    assert [(d.score, d.metadata) for d in chroma.documents] == [
        (None, {"source": "policies/returns.md", "distance": 0.11}),
        (None, {"source": "policies/shipping.md", "distance": 0.58}),
    ]
    assert {chroma.convention, openinference.convention} == {"openllmetry", "openinference"}


@pytest.mark.parametrize("name", CONVENTIONS)
def test_the_summary_agrees_with_the_full_view(name):
    trace_id, spans = load_spans(name, RAG_DIR)
    full = build_agent_trace(trace_id, spans)
    summary = summarize(read_span_views(trace_id, spans))
    assert (summary.user_input, summary.final_output, summary.recognized) == (
        full.user_input,
        full.final_output,
        full.recognized,
    )


def _reranked(i: int, doc_id: str, score: float, content: str, direction: str = "output") -> dict:
    prefix = f"reranker.{direction}_documents.{i}.document."
    return {f"{prefix}id": doc_id, f"{prefix}score": score, f"{prefix}content": content}


def test_a_reranker_step_holds_its_query_model_and_output_documents():
    reranker = make_span(
        "CohereRerank",
        {
            "openinference.span.kind": "RERANKER",
            "reranker.query": "return window",
            "reranker.model_name": "rerank-english-v3.0",
            "reranker.top_k": 1,
            **_reranked(0, "a", 0.2, "shipping", "input"),
            **_reranked(1, "b", 0.1, "returns", "input"),
            **_reranked(0, "b", 0.97, "returns"),
        },
    )
    [step] = build(reranker).steps
    assert (step.kind, step.query, step.model, step.document_count) == (
        "retrieval",
        "return window",
        "rerank-english-v3.0",
        1,
    )
    assert [(d.id, d.score, d.content) for d in step.documents] == [("b", 0.97, "returns")]


def test_a_lone_retrieval_is_not_an_agent_run():
    span = make_span(
        "retrieval kb",
        {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": json.dumps([{"id": "1", "score": 0.5}])},
    )
    trace = build(span)
    assert [step.kind for step in trace.steps] == ["retrieval"]
    assert not trace.recognized
    assert not summarize(read_span_views(TRACE_ID, with_resource(span))).recognized


def test_a_retriever_inside_a_retriever_with_documents_is_one_retrieval():
    outer = make_span(
        "RetrieverQueryEngine.retrieve",
        {"openinference.span.kind": "RETRIEVER", "input.value": "q", "retrieval.documents.0.document.content": "x"},
        start=1,
        end=100,
    )
    inner = make_span(
        "VectorIndexRetriever.retrieve",
        {"openinference.span.kind": "RETRIEVER", "input.value": "q", "retrieval.documents.0.document.content": "x"},
        parent=outer,
        start=2,
        end=90,
    )
    assert [step.span_id for step in build(outer, inner).steps] == [outer.span_id.hex()]


def test_a_retriever_without_documents_leaves_the_inner_one_that_has_them():
    outer = make_span("query", {"openinference.span.kind": "RETRIEVER", "input.value": "q"}, start=1, end=100)
    inner = make_span(
        "chroma.query",
        {"db.system": "chroma", "db.operation": "query"},
        parent=outer,
        start=2,
        end=90,
        events=[("db.query.result", {"db.query.result.id": "1", "db.query.result.document": "x"})],
    )
    steps = build(outer, inner).steps
    assert [(s.span_id, s.document_count) for s in steps] == [(outer.span_id.hex(), 0), (inner.span_id.hex(), 1)]


def test_vector_store_writes_and_other_databases_are_not_retrievals():
    add = make_span("chroma.add", {"db.system": "chroma", "db.operation": "add"})
    sql = make_span("SELECT", {"db.system": "postgresql", "db.operation": "SELECT", "db.statement": "select 1"})
    trace = build(add, sql)
    assert trace.steps == [] and trace.conventions == set()


def _langchain_retriever_task(output: str) -> dict:
    # As opentelemetry-instrumentation-langchain 0.62.4 records a LangChain retriever.
    return {
        "traceloop.span.kind": "task",
        "traceloop.entity.name": "VectorStoreRetriever",
        "gen_ai.operation.name": "vector_db_retrieve",
        "traceloop.entity.input": json.dumps({"query": "return window", "tags": ["seq:step:1"], "metadata": {}}),
        "traceloop.entity.output": output,
    }


def test_openllmetry_s_langchain_retriever_task_is_a_retrieval_with_its_query_and_documents():
    output = json.dumps(
        {
            "documents": [
                {"page_content": "Returns within 30 days.", "metadata": {"source": "returns.md"}, "type": "Document"},
                {"page_content": "Shipping takes 5 days.", "metadata": {"source": "shipping.md"}, "type": "Document"},
            ]
        }
    )
    [step] = build(make_span("VectorStoreRetriever.task", _langchain_retriever_task(output))).steps
    assert (step.kind, step.query, step.document_count, step.convention) == (
        "retrieval",
        "return window",
        2,
        "openllmetry",
    )
    assert [(d.content, d.metadata) for d in step.documents] == [
        ("Returns within 30 days.", {"source": "returns.md"}),
        ("Shipping takes 5 days.", {"source": "shipping.md"}),
    ]


@pytest.mark.parametrize("output", ["not json", json.dumps({"documents": "none"}), json.dumps([1, None]), ""])
def test_a_langchain_retriever_task_with_odd_output_keeps_its_query_and_no_documents(output):
    [step] = build(make_span("VectorStoreRetriever.task", _langchain_retriever_task(output))).steps
    assert (step.kind, step.query, step.documents) == ("retrieval", "return window", [])


def test_a_qdrant_query_named_after_its_method_is_a_retrieval_without_documents():
    # opentelemetry-instrumentation-qdrant 0.62.4: no db.operation, no results recorded.
    attributes = {"db.system": "Qdrant", "qdrant.search.collection_name": "docs", "db.vector.query.top_k": 2}
    for name in ("qdrant.query_points", "qdrant.search", "qdrant.search_batch"):
        [step] = build(make_span(name, attributes)).steps
        assert (step.kind, step.query, step.documents, step.document_count) == ("retrieval", None, [], 0), name
    upsert = make_span("qdrant.upsert", {"db.system": "Qdrant", "qdrant.upsert.points_count": 4})
    assert build(upsert).steps == []
    # db.operation, when recorded, names the call rather than the span name.
    add = make_span("chroma.query_like_name", {"db.system": "chroma", "db.operation": "add"})
    assert build(add).steps == []


def test_a_failed_retrieval_step_carries_the_error():
    span = make_span(
        "VectorStoreRetriever", {"openinference.span.kind": "RETRIEVER", "input.value": "q"}, error="index down"
    )
    [step] = build(span).steps
    assert (step.kind, step.error, step.documents) == ("retrieval", "index down", [])


# -- bounds ----------------------------------------------------------------------------


def test_ten_thousand_indexed_documents_keep_the_first_fifty_and_count_all():
    attributes = {"openinference.span.kind": "RETRIEVER", "input.value": "q"}
    for i in range(10_000):
        attributes[f"retrieval.documents.{i}.document.id"] = f"d{i}"
        attributes[f"retrieval.documents.{i}.document.content"] = f"text {i}"
    [step] = build(make_span("retrieve", attributes)).steps
    assert step.document_count == 10_000
    assert [d.id for d in step.documents] == [f"d{i}" for i in range(MAX_DOCUMENTS)]


def test_ten_thousand_json_documents_keep_the_first_fifty_and_count_all():
    documents = [{"id": str(i), "score": 1 / (i + 1), "content": f"text {i}"} for i in range(10_000)]
    span = make_span(
        "retrieval kb", {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": json.dumps(documents)}
    )
    [step] = build(span).steps
    assert (step.document_count, len(step.documents), step.documents[-1].id) == (
        10_000,
        MAX_DOCUMENTS,
        str(MAX_DOCUMENTS - 1),
    )


def test_a_ten_megabyte_document_and_query_are_cut_with_their_length_kept():
    big = "x" * 10_000_000
    span = make_span(
        "retrieve",
        {
            "openinference.span.kind": "RETRIEVER",
            "input.value": big,
            "retrieval.documents.0.document.content": big,
            "retrieval.documents.0.document.metadata": json.dumps({"blob": big}),
        },
    )
    [step] = build(span).steps
    [document] = step.documents
    assert (len(document.content), document.content_chars) == (MAX_DOCUMENT_CHARS, 10_000_000)
    assert len(step.query) == MAX_DOCUMENT_CHARS
    assert isinstance(document.metadata, str) and len(document.metadata) == MAX_METADATA_CHARS


def test_odd_document_values_give_fewer_documents_not_errors():
    span = make_span(
        "retrieval kb",
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.retrieval.documents": json.dumps([3, None, {"score": "high"}, "plain text"]),
        },
    )
    [step] = build(span).steps
    assert [(d.content, d.score) for d in step.documents] == [("", None), ("plain text", None)]
    assert step.document_count == 4


# -- what the existing metrics read ----------------------------------------------------


def _without_retrieval(trace):
    return trace.model_copy(update={"steps": [s for s in trace.steps if s.kind != "retrieval"]})


@pytest.mark.parametrize("name", CONVENTIONS)
def test_the_trace_judge_sees_a_rag_trace_as_it_did_before_retrieval_steps(name):
    from spanscore.processors.ground_truth.prompts import transcript_block
    from spanscore.processors.judge_metrics.prompts import PromptBuilder

    trace = load_trace(name, RAG_DIR)
    builder = PromptBuilder()
    assert builder.data_block(trace) == builder.data_block(_without_retrieval(trace))
    assert transcript_block(builder, [trace]) == transcript_block(builder, [_without_retrieval(trace)])


def test_a_trace_with_only_retrievals_shows_the_judge_no_steps():
    from spanscore.processors.judge_metrics.prompts import PromptBuilder

    span = make_span("retriever", {"openinference.span.kind": "RETRIEVER", "input.value": "q"}, error="index down")
    assert "steps: none" in PromptBuilder().data_block(build(span))


def test_failure_localization_shows_a_retrieval_step_as_a_retrieval():
    from spanscore.processors.localization.run_steps import render, run_steps

    trace = load_trace("openinference", RAG_DIR)
    first = render(run_steps(trace)[0], 200)
    assert "· retrieval VectorStoreRetriever" in first and f"query: {rag.QUESTION}" in first and "documents: 2" in first


_DOCUMENT_KEYS = (
    "id",
    "content",
    "page_content",
    "text",
    "score",
    "metadata",
    "document",
    "node",
    "documents",
    "query",
)
document_like = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(_DOCUMENT_KEYS), children, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(document_like, json_values(8)))
def test_reading_documents_and_queries_never_raises(value):
    # The adapters swallow an exception (the span then has no documents): here none may occur.
    from spanscore.processors.agent_trace.retrieval import documents_of, metadata_value, query_text

    documents, count = documents_of(value)
    assert len(documents) <= min(count, MAX_DOCUMENTS)
    documents, _ = documents_of(json.dumps(value))
    assert all(len(d.content) <= MAX_DOCUMENT_CHARS for d in documents)
    query_text(value)
    metadata_value(value)


def test_documents_are_read_from_the_shapes_frameworks_record():
    from spanscore.processors.agent_trace.retrieval import documents_of

    nodes = [{"node": {"id_": "n1", "text": "returns", "metadata": {"page": 2}}, "score": 0.7}]
    langchain = {"documents": [{"id": "d1", "page_content": "shipping", "metadata": {}, "type": "Document"}]}
    nested = [{"document": {"id": "x", "content": "policy", "score": 0.5}}]
    assert [(d.id, d.content, d.score, d.metadata) for d in documents_of(nodes)[0]] == [
        ("n1", "returns", 0.7, {"page": 2})
    ]
    assert [(d.id, d.content) for d in documents_of(json.dumps(langchain))[0]] == [("d1", "shipping")]
    assert [(d.id, d.score) for d in documents_of(nested)[0]] == [("x", 0.5)]
    assert [d.content for d in documents_of(["one", "two"])[0]] == ["one", "two"]


def test_the_recorded_langchain_rag_app_is_read_with_its_documents():
    # examples/agents/langchain_rag.py as its OpenInference instrumentation exported it
    traces = spans_by_trace(read_requests(SPANS_DIR / "frameworks" / "langchain_rag.jsonl"))
    runs = sorted(
        (build_agent_trace(trace_id, spans) for trace_id, spans in traces.items()),
        key=lambda run: run.steps[0].start_time_unix_nano,
    )
    assert [run.user_input for run in runs] == [turn.question for turn in docs_qa.TURNS]
    for run, turn in zip(runs, docs_qa.TURNS):
        assert [step.kind for step in run.steps] == ["retrieval", "llm"]
        [retrieval] = run.retrieval_steps
        assert retrieval.query == turn.question and retrieval.document_count == len(retrieval.documents) == 2
        assert all(d.content and d.content_chars == len(d.content) for d in retrieval.documents)
        assert any(turn.evidence in d.content for d in retrieval.documents)
        assert retrieval.end_time_unix_nano <= run.llm_steps[0].start_time_unix_nano
        assert run.final_output == turn.answer
