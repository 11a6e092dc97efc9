"""OpenLLMetry (Traceloop) conventions.

Spans made by Traceloop's decorators carry `traceloop.span.kind` (workflow, task, agent,
tool), `traceloop.entity.name` and the decorated function's input and output in
`traceloop.entity.input` / `traceloop.entity.output`, the input recorded as
`{"args": [...], "kwargs": {...}}`. Association properties
(`traceloop.association.properties.*`) hold the session and user ids. LLM spans of
current versions use the GenAI attributes (read by `genai`); older versions listed
offered functions as `llm.request.functions.N.name/description/parameters` and typed
the span with `llm.request.type`. Its LangChain instrumentation records a retriever as a
task span with `gen_ai.operation.name` `vector_db_retrieve`, the query in the entity's
input (`{"query": ...}`) and the documents in its output (`{"documents": [{"page_content":
..., "metadata": ...}]}`): a retrieval step.

Its vector-store instrumentations (Chroma, Pinecone, Qdrant, Weaviate, Milvus, LanceDB,
Marqo) name the store in `db.system` and the call in `db.operation`, and record each
result of a query as a `db.query.result` span event (`db.query.result.id`, `.score`,
`.distance`, `.metadata`, `.document`) or a `db.search.result` one (`db.search.result.id`,
`.score`, `.distance`, `.entity`); the query text itself is not recorded. Some record no
`db.operation` and no results at all: Qdrant's spans are named `qdrant.<method>`
(`qdrant.query_points`) and carry only the collection and the query's `db.vector.query.top_k`,
so they make a retrieval step without documents. A query becomes a retrieval step; a
distance, lower for closer, is kept in the document's metadata rather than taken for a
score.
"""

from __future__ import annotations

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.agent_trace.content import tool_definitions, unwrap_call_input
from spanscore.processors.agent_trace.model import Document
from spanscore.processors.agent_trace.retrieval import MAX_DOCUMENTS, document, documents_of, metadata_value, query_text
from spanscore.processors.agent_trace.spans import AGENT, CHAIN, LLM, RETRIEVAL, TOOL, SpanView

CONVENTION = "openllmetry"

# A span with no key under these is not read at all.
KEY_PREFIXES = ("traceloop.", "llm.", "db.system")

VECTOR_STORES = frozenset({"chroma", "pinecone", "qdrant", "weaviate", "milvus", "lancedb", "marqo"})
_RESULT_EVENTS = {"db.query.result": "db.query.result.", "db.search.result": "db.search.result."}
_QUERY_OPERATIONS = ("query", "search")  # words of the store's method: query, _query, search_batch, ...

_ROLE_BY_KIND = {"workflow": CHAIN, "task": CHAIN, "agent": AGENT, "tool": TOOL}
_RETRIEVAL_OPERATIONS = frozenset({"vector_db_retrieve"})  # gen_ai.operation.name of a LangChain retriever
_LLM_REQUEST_TYPES = {"chat", "completion", "rerank"}


def apply(view: SpanView) -> bool:
    attrs = view.attrs
    if not attrs.has_prefix(KEY_PREFIXES):  # none of the keys read below
        return False
    if "db.system" in attrs and _apply_vector_query(view):
        return True
    kind = attrs.text("traceloop.span.kind")
    request_type = attrs.text("llm.request.type")
    functions = attrs.nested("llm.request.functions.")
    if kind is None and request_type is None and functions is None and not attrs.has_prefix("traceloop."):
        return False
    view.conventions.add(CONVENTION)
    role = _ROLE_BY_KIND.get((kind or "").lower())
    if attrs.text("gen_ai.operation.name") in _RETRIEVAL_OPERATIONS:
        role = RETRIEVAL
    if role is None and request_type in _LLM_REQUEST_TYPES:
        role = LLM
    view.fill("role", role)
    view.add_tools(tool_definitions(functions))
    view.fill("user_id", attrs.text("traceloop.association.properties.user_id"))

    name = attrs.text("traceloop.entity.name")
    if role == TOOL:
        view.fill("tool_name", name)
        view.fill("tool_arguments", unwrap_call_input(attrs.get("traceloop.entity.input")))
        view.fill("tool_result", attrs.get("traceloop.entity.output"))
    elif role == RETRIEVAL:
        view.fill("retrieval_query", query_text(attrs.get("traceloop.entity.input")))
        if not view.documents:
            view.documents, view.document_count = documents_of(attrs.get("traceloop.entity.output"))
    elif role in (AGENT, CHAIN):
        if role == AGENT:
            view.fill("agent_name", name)
        view.fill("input", attrs.get("traceloop.entity.input"))
        view.fill("output", attrs.get("traceloop.entity.output"))
    return True


def _apply_vector_query(view: SpanView) -> bool:
    """A vector store's query span as a retrieval: True when it is one."""
    attrs = view.attrs
    if (attrs.text("db.system") or "").lower() not in VECTOR_STORES:
        return False
    results = [event for event in view.span.events if event.name in _RESULT_EVENTS]
    # Without db.operation, the method the span is named after (`qdrant.query_points`).
    operation = (attrs.text("db.operation") or view.name.rpartition(".")[2]).lower()
    if not results and not any(word in operation for word in _QUERY_OPERATIONS):
        return False  # add, upsert, delete, ...
    view.conventions.add(CONVENTION)
    view.fill("role", RETRIEVAL)
    if results and not view.documents:
        view.documents = [_result_document(event) for event in results[:MAX_DOCUMENTS]]
        view.document_count = len(results)
    return True


def _result_document(event) -> Document:
    prefix = _RESULT_EVENTS[event.name]
    values = attributes_to_dict(event.attributes)
    metadata = metadata_value(values.get(f"{prefix}metadata"))
    distance = values.get(f"{prefix}distance")
    if distance is not None:
        if isinstance(metadata, dict):
            metadata = {**metadata, "distance": distance}
        else:
            metadata = {"distance": distance} if metadata is None else {"distance": distance, "metadata": metadata}
    content = values.get(f"{prefix}document", values.get(f"{prefix}entity"))
    return document(values.get(f"{prefix}id"), content, values.get(f"{prefix}score"), metadata)
