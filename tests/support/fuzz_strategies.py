"""Hypothesis strategies shared by the fuzz tests: OTLP requests, JSON values, mutations.

`requests()` builds valid `ExportTraceServiceRequest`s using every trace field and every
AnyValue kind; `json_values()` any JSON document, biased towards OTLP's own key names so
the decoder gets past its first checks; `mutated()` rewrites a JSON document at random
places; `flipped()` damages protobuf bytes. The valid inputs the mutators start from are
real captures (tests/fixtures/spans) and `every_field_request`.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from tests.support.spans import every_field_request

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "spans"

# Key names of OTLP/JSON (both spellings the decoder accepts) and of AnyValue, so random
# documents reach the id conversion and the protobuf parser rather than stopping at "no such key".
OTLP_KEYS = (
    "resourceSpans",
    "resource_spans",
    "scopeSpans",
    "scope_spans",
    "spans",
    "resource",
    "scope",
    "attributes",
    "key",
    "value",
    "stringValue",
    "intValue",
    "doubleValue",
    "boolValue",
    "bytesValue",
    "arrayValue",
    "kvlistValue",
    "values",
    "traceId",
    "spanId",
    "parentSpanId",
    "trace_id",
    "span_id",
    "parent_span_id",
    "links",
    "events",
    "name",
    "kind",
    "status",
    "code",
    "message",
    "flags",
    "traceState",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "timeUnixNano",
    "droppedAttributesCount",
    "schemaUrl",
    "version",
)

# Ids as OTLP/JSON writes them, and as clients get them wrong.
BAD_HEX = st.one_of(
    st.text(alphabet="0123456789abcdefABCDEF", max_size=40),
    st.text(max_size=40),
    st.sampled_from(["", "0" * 32, "0" * 16, "zz", " ab ", "0x" + "1" * 30, "１" * 16]),
)


def hex_id(size: int) -> st.SearchStrategy[bytes]:
    """A valid id: `size` bytes, not all zero."""
    return st.binary(min_size=size, max_size=size).map(lambda b: b if any(b) else b[:-1] + b"\x01")


TRACE_IDS = hex_id(16)
SPAN_IDS = hex_id(8)

# Int64 over its whole range, the JavaScript-unsafe values included; doubles with NaN,
# the infinities and -0.0 (OTLP/JSON spells them "NaN", "Infinity", "-Infinity"). One NaN:
# JSON has no way to write a NaN's sign and payload bits, so only the canonical one round-trips.
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINT64 = st.integers(min_value=0, max_value=2**64 - 1)
UINT32 = st.integers(min_value=0, max_value=2**32 - 1)
DOUBLES = st.floats(allow_nan=True, allow_infinity=True).map(lambda x: math.nan if math.isnan(x) else x)
TEXT = st.text(max_size=30)


def _kv(children: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[KeyValue]:
    return st.builds(KeyValue, key=TEXT, value=children)


SCALAR_VALUES = st.one_of(
    st.just(AnyValue()),  # an empty value is legal
    st.builds(AnyValue, string_value=TEXT),
    st.builds(AnyValue, bool_value=st.booleans()),
    st.builds(AnyValue, int_value=INT64),
    st.builds(AnyValue, double_value=DOUBLES),
    st.builds(AnyValue, bytes_value=st.binary(max_size=20)),
)

ANY_VALUES: st.SearchStrategy[AnyValue] = st.recursive(
    SCALAR_VALUES,
    lambda children: st.one_of(
        st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(children, max_size=3)),
        st.builds(lambda kvs: AnyValue(kvlist_value=KeyValueList(values=kvs)), st.lists(_kv(children), max_size=3)),
    ),
    max_leaves=6,
)

ATTRIBUTES = st.lists(_kv(ANY_VALUES), max_size=3)


@st.composite
def spans(draw, trace_id: bytes | None = None) -> Span:
    parent = draw(st.one_of(st.just(b""), SPAN_IDS))
    return Span(
        trace_id=trace_id if trace_id is not None else draw(TRACE_IDS),
        span_id=draw(SPAN_IDS),
        parent_span_id=parent,
        trace_state=draw(st.sampled_from(["", "vendor=a,other=b"])),
        flags=draw(UINT32),
        name=draw(TEXT),
        kind=draw(st.sampled_from(list(Span.SpanKind.values()))),
        start_time_unix_nano=draw(UINT64),
        end_time_unix_nano=draw(UINT64),
        attributes=draw(ATTRIBUTES),
        dropped_attributes_count=draw(UINT32),
        events=draw(
            st.lists(
                st.builds(
                    Span.Event, time_unix_nano=UINT64, name=TEXT, attributes=ATTRIBUTES, dropped_attributes_count=UINT32
                ),
                max_size=2,
            )
        ),
        dropped_events_count=draw(UINT32),
        links=draw(
            st.lists(
                st.builds(
                    Span.Link,
                    trace_id=TRACE_IDS,
                    span_id=SPAN_IDS,
                    trace_state=st.sampled_from(["", "l=1"]),
                    attributes=ATTRIBUTES,
                    dropped_attributes_count=UINT32,
                    flags=UINT32,
                ),
                max_size=2,
            )
        ),
        dropped_links_count=draw(UINT32),
        status=Status(code=draw(st.sampled_from(list(Status.StatusCode.values()))), message=draw(TEXT)),
    )


BAD_IDS = st.sampled_from([b"", b"\x00" * 16, b"\x00" * 8, b"\x01" * 3, b"\x01" * 17, b"\x07" * 1000, b"\x01" * 9])


@st.composite
def with_bad_ids(draw, request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """`request` (copied) with the trace, span or parent id of some of its spans invalid."""
    copy = ExportTraceServiceRequest()
    copy.CopyFrom(request)
    spans = [s for rs in copy.resource_spans for ss in rs.scope_spans for s in ss.spans]
    for span in draw(st.lists(st.sampled_from(spans), min_size=1, max_size=len(spans))):
        field = draw(st.sampled_from(["trace_id", "span_id", "parent_span_id"]))
        setattr(span, field, draw(BAD_IDS.filter(lambda b, f=field: f != "parent_span_id" or len(b) not in (0, 8))))
    return copy


@st.composite
def requests(draw) -> ExportTraceServiceRequest:
    """A valid request: 1-2 resources, 1-2 scopes each, spans of a few traces."""
    trace_ids = draw(st.lists(TRACE_IDS, min_size=1, max_size=3))
    resource_spans = []
    for _ in range(draw(st.integers(1, 2))):
        scope_spans = [
            ScopeSpans(
                scope=InstrumentationScope(name=draw(TEXT), version=draw(TEXT), attributes=draw(ATTRIBUTES)),
                schema_url=draw(TEXT),
                spans=draw(st.lists(spans(trace_id=draw(st.sampled_from(trace_ids))), min_size=1, max_size=3)),
            )
            for _ in range(draw(st.integers(1, 2)))
        ]
        resource_spans.append(
            ResourceSpans(
                resource=Resource(attributes=draw(ATTRIBUTES)), schema_url=draw(TEXT), scope_spans=scope_spans
            )
        )
    return ExportTraceServiceRequest(resource_spans=resource_spans)


# JSON ------------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    BAD_HEX,
)


@cache  # built once per size: a recursive strategy costs more to build than to draw from
def json_values(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    keys = st.one_of(st.sampled_from(OTLP_KEYS), st.text(max_size=10))
    return st.recursive(
        JSON_SCALARS,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
        max_leaves=max_leaves,
    )


@st.composite
def otlp_shaped(draw) -> dict[str, Any]:
    """A document with OTLP/JSON's nesting (resourceSpans, scopeSpans, spans, attributes,
    links) and arbitrary JSON wherever a value goes."""

    def some(keys: tuple[str, ...], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        node = {key: draw(json_values(max_leaves=3)) for key in draw(st.lists(st.sampled_from(keys), max_size=4))}
        return {**node, **(extra or {})}

    attributes = st.lists(
        st.fixed_dictionaries(
            {"key": st.one_of(st.text(max_size=8), json_values(2))}, optional={"value": json_values(max_leaves=6)}
        ),
        max_size=3,
    )
    span_keys = (
        "traceId",
        "spanId",
        "parentSpanId",
        "trace_id",
        "span_id",
        "name",
        "kind",
        "startTimeUnixNano",
        "endTimeUnixNano",
        "flags",
        "status",
        "events",
        "droppedAttributesCount",
        "traceState",
    )
    span_list = [
        some(
            span_keys,
            {
                "attributes": draw(attributes),
                "links": [some(("traceId", "spanId", "traceState", "flags")) for _ in range(draw(st.integers(0, 2)))],
            },
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    scope = {
        draw(st.sampled_from(["scopeSpans", "scope_spans"])): [
            {"scope": some(("name", "version", "attributes")), "spans": span_list}
        ]
    }
    return {
        draw(st.sampled_from(["resourceSpans", "resource_spans"])): [
            {"resource": {"attributes": draw(attributes)}, **scope}
        ]
    }


@cache
def fixture_documents() -> tuple[str, ...]:
    """Every captured OTLP/JSON request (one per line) of tests/fixtures/spans, as text."""
    lines = []
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        lines.extend(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return tuple(lines)


@cache
def fixture_requests() -> tuple[bytes, ...]:
    """The fixtures and every_field_request, as protobuf bytes: inputs for bit flips."""
    from spanscore.core.otlp_json import decode_request

    encoded = [decode_request(line).SerializeToString() for line in fixture_documents()]
    return tuple([every_field_request().SerializeToString(), *encoded])


def json_paths(node: Any, path: tuple = ()) -> list[tuple]:
    """Every path to a node of a JSON document (the root is the empty path)."""
    found = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            found.extend(json_paths(child, (*path, key)))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found.extend(json_paths(child, (*path, i)))
    return found


def _replace(node: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[head] = _replace(node[head], rest, value)
    return copy


def _delete(node: Any, path: tuple) -> Any:
    if len(path) == 1:
        copy = dict(node) if isinstance(node, dict) else list(node)
        del copy[path[0]]
        return copy
    head, rest = path[0], path[1:]
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[head] = _delete(node[head], rest)
    return copy


def _lookup(node: Any, path: tuple) -> Any:
    for step in path:
        node = node[step]
    return node


@st.composite
def mutated(draw, document: Any, rounds: int = 3) -> Any:
    """`document` with 1..`rounds` random edits: a node replaced (by any JSON value, an id
    string, or its own type's neighbour), deleted, duplicated into a list, or a key added."""
    for _ in range(draw(st.integers(1, rounds))):
        paths = json_paths(document)
        path = draw(st.sampled_from(paths))
        node = _lookup(document, path)
        edit = draw(st.sampled_from(["replace", "id", "delete", "grow", "add_key", "stringify", "nest"]))
        if edit == "replace":
            document = _replace(document, path, draw(json_values(max_leaves=4)))
        elif edit == "id":
            document = _replace(document, path, draw(BAD_HEX))
        elif edit == "delete" and path:
            document = _delete(document, path)
        elif edit == "grow" and isinstance(node, list) and node:
            document = _replace(document, path, node + [draw(st.sampled_from(node))])
        elif edit == "add_key" and isinstance(node, dict):
            document = _replace(document, path, {**node, draw(st.sampled_from(OTLP_KEYS)): draw(json_values(4))})
        elif edit == "stringify":  # numbers as strings, strings as numbers: the int64 mapping's edge
            if isinstance(node, (int, float)) and not isinstance(node, bool):
                document = _replace(document, path, str(node))
            elif isinstance(node, str) and node.lstrip("-").isdigit():
                document = _replace(document, path, int(node))
        elif edit == "nest":
            document = _replace(
                document, path, draw(st.sampled_from([[node], {"value": node}, {"arrayValue": {"values": [node]}}]))
            )
    return document


@st.composite
def text_mutated(draw, text: str, rounds: int = 3) -> str:
    """`text` with characters inserted, deleted, or a slice truncated/duplicated."""
    for _ in range(draw(st.integers(1, rounds))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["insert", "delete", "truncate", "duplicate"]))
        if edit == "insert":
            text = (
                text[:at]
                + draw(st.text(alphabet=st.sampled_from('{}[]":,0123456789 \\\nau-'), min_size=1, max_size=3))
                + text[at:]
            )
        elif edit == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 5)) :]
        elif edit == "truncate":
            text = text[:at]
        else:
            end = draw(st.integers(at, min(len(text), at + 40)))
            text = text[:end] + text[at:end] + text[end:]
    return text


@st.composite
def flipped(draw, data: bytes, rounds: int = 4) -> bytes:
    """`data` with bits flipped, bytes overwritten, inserted or deleted, or cut short."""
    buffer = bytearray(data)
    for _ in range(draw(st.sampled_from([1, 1, 1, *range(2, rounds + 1)]))):
        if not buffer:
            buffer.extend(draw(st.binary(min_size=1, max_size=8)))
            continue
        at = draw(st.integers(0, len(buffer) - 1))
        edit = draw(st.sampled_from(["bit", "bit", "byte", "insert", "delete", "truncate", "varint"]))
        if edit == "bit":
            buffer[at] ^= 1 << draw(st.integers(0, 7))
        elif edit == "byte":
            buffer[at] = draw(st.integers(0, 255))
        elif edit == "insert":
            buffer[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "delete":
            del buffer[at : at + draw(st.integers(1, 8))]
        elif edit == "truncate":
            del buffer[at:]
        else:  # a length prefix or varint made huge: the parser must not trust it
            buffer[at : at + 1] = draw(
                st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xff" * 10])
            )
    return bytes(buffer)


def json_text(document: Any) -> str:
    """json.dumps as a client might, NaN and Infinity written bare (invalid JSON, but Python's
    parser reads them back)."""
    return json.dumps(document, ensure_ascii=False)
