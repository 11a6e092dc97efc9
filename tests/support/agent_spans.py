"""Hand-made agent spans with events and error status, for normalizer edge-case tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.support.spans import kv

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
_span_numbers = itertools.count(1)


def make_span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    id: bytes | None = None,
    parent: Span | bytes | None = None,
    start: int = 1_000,
    end: int | None = None,
    events: Sequence[tuple[str, Mapping[str, Any]]] = (),
    error: str | None = None,
    trace_id: bytes = TRACE_ID,
) -> Span:
    """A span whose attribute values may be str, numbers, lists (arrays) or dicts (kvlists)."""
    span = Span(
        trace_id=trace_id,
        span_id=id or next(_span_numbers).to_bytes(8, "big"),
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=end if end is not None else start + 100,
    )
    if parent is not None:
        span.parent_span_id = parent.span_id if isinstance(parent, Span) else parent
    span.attributes.extend(kv(k, v) for k, v in (attributes or {}).items())
    for event_name, event_attributes in events:
        event = span.events.add(name=event_name, time_unix_nano=start)
        event.attributes.extend(kv(k, v) for k, v in event_attributes.items())
    if error is not None:
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = error
    return span


def with_resource(*spans: Span, service: str = "test-agent") -> list[tuple[Span, Resource]]:
    resource = Resource(attributes=[kv("service.name", service)])
    return [(span, resource) for span in spans]
