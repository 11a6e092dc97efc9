"""Documents a retrieval returned, and its query, read within bounds whatever their shape.

A retriever may return thousands of documents, each megabytes long. A retrieval step
keeps the first `MAX_DOCUMENTS` in the retriever's order, each cut at
`MAX_DOCUMENT_CHARS` characters (the length as recorded kept beside it), and counts
them all; metadata is parsed when its text is at most `MAX_METADATA_CHARS` long and
kept as cut text otherwise; the query is cut like a document. Indexed attributes
(OpenInference's `retrieval.documents.{i}.document.*`) are read for the kept indices
only; a JSON list (GenAI's `gen_ai.retrieval.documents`, a Langfuse output) is decoded
whole, as any attribute value is, within the receiver's request-size limit.

Everything here is total: odd input yields fewer documents or none, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from spanscore.processors.agent_trace.attributes import KeyShape, SpanAttributes
from spanscore.processors.agent_trace.content import MAPPING, content_text, parse_json, to_text, unwrap_call_input
from spanscore.processors.agent_trace.model import Document, new_document

MAX_DOCUMENTS = 50
MAX_DOCUMENT_CHARS = 10_000
MAX_METADATA_CHARS = 4_000

# Where documents keep their fields in the shapes read by `documents_of`: LangChain's
# Document (`page_content`), LlamaIndex's NodeWithScore (`node.text`), OpenInference's
# `document.*`, vector-store results.
_ID_KEYS = ("id", "document_id", "doc_id", "node_id", "id_")
_CONTENT_KEYS = ("content", "page_content", "pageContent", "text", "document", "chunk")
_SCORE_KEYS = ("score", "relevance_score", "similarity")
_METADATA_KEYS = ("metadata", "meta")
_WRAPPERS = ("document", "node")  # {"document": {...}} / {"node": {...}, "score": ...}
_LISTS = ("documents", "results", "nodes", "source_nodes", "matches")
_QUERY_KEYS = ("query", "query_str", "question", "input", "text")


def cut(text: str) -> str:
    return text if len(text) <= MAX_DOCUMENT_CHARS else text[:MAX_DOCUMENT_CHARS]


def query_text(value: Any) -> str | None:
    """A retrieval's query from its recorded input: the text, a call's one argument, or
    the `query` (`query_str`, `question`, ...) of a mapping."""
    value = unwrap_call_input(value)
    if isinstance(value, MAPPING):
        found = next((value[key] for key in _QUERY_KEYS if isinstance(value.get(key), str)), None)
        value = found if found is not None else value
    elif isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]
    text = value if isinstance(value, str) else to_text(value)
    return cut(text) if text else None


def document(identifier: Any, content: Any, score: Any, metadata: Any) -> Document:
    """One document from its recorded fields, bounded."""
    text = content if isinstance(content, str) else content_text(content) if content is not None else ""
    return new_document(
        dict(
            id=None if identifier is None or identifier == "" else str(identifier),
            content=cut(text),
            content_chars=len(text),
            score=_number(score),
            metadata=metadata_value(metadata),
        )
    )


def documents_of(value: Any) -> tuple[list[Document], int]:
    """The documents in a JSON-like value (a list of documents or texts, or a mapping
    holding one under `documents`, `results`, `nodes`, ...) and how many there were."""
    value = parse_json(value)
    if isinstance(value, MAPPING):
        value = next((value[key] for key in _LISTS if isinstance(value.get(key), list)), None)
    if not isinstance(value, list):
        return [], 0
    kept = [_item(item) for item in value[:MAX_DOCUMENTS]]
    return [d for d in kept if d is not None], len(value)


def _item(item: Any) -> Document | None:
    if isinstance(item, str):
        return document(None, item, None, None)
    if not isinstance(item, MAPPING):
        return None
    score = _first(item, _SCORE_KEYS)
    for wrapper in _WRAPPERS:
        inner = item.get(wrapper)
        if isinstance(inner, MAPPING):
            found = _item(inner)
            if found is not None and found.score is None and score is not None:
                found.score = _number(score)
            return found
    return document(_first(item, _ID_KEYS), _first(item, _CONTENT_KEYS), score, _first(item, _METADATA_KEYS))


def _first(item: Any, keys: Iterable[str]) -> Any:
    for key in keys:
        value = item.get(key)
        if value is not None and value != "":
            return value
    return None


def flattened_documents(attrs: SpanAttributes, prefix: str) -> tuple[list[Document], int]:
    """Documents in indexed keys `<prefix>{i}.document.{id,content,score,metadata}`
    (OpenInference), reading the first `MAX_DOCUMENTS` indices only."""
    indices = attrs.shape_fact(_index_fact(prefix))
    if not indices:
        return [], 0
    get = attrs.get
    documents = [
        document(
            get(f"{prefix}{i}.document.id"),
            get(f"{prefix}{i}.document.content"),
            get(f"{prefix}{i}.document.score"),
            get(f"{prefix}{i}.document.metadata"),
        )
        for i in indices[:MAX_DOCUMENTS]
    ]
    return documents, len(indices)


_INDEX_FACTS: dict[str, Callable[[KeyShape], tuple[int, ...]]] = {}


def _index_fact(prefix: str) -> Callable[[KeyShape], tuple[int, ...]]:
    """The computation, kept per prefix so a key shape answers it once: the distinct
    indices under `prefix`, in order."""
    fact = _INDEX_FACTS.get(prefix)
    if fact is None:
        size = len(prefix)

        def indices(shape: KeyShape) -> tuple[int, ...]:
            found = {key[size:].partition(".")[0] for key in shape.under(prefix)}
            return tuple(sorted(int(head) for head in found if head.isdigit()))

        fact = _INDEX_FACTS[prefix] = indices
    return fact


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def metadata_value(value: Any) -> Any:
    """Recorded metadata as a JSON-like value, bounded (text past MAX_METADATA_CHARS is cut, not parsed)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if len(value) > MAX_METADATA_CHARS:
            return value[:MAX_METADATA_CHARS]
        return parse_json(value)
    if isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, (MAPPING, list)):
        text = to_text(value) or ""
        return value if len(text) <= MAX_METADATA_CHARS else text[:MAX_METADATA_CHARS]
    return value
