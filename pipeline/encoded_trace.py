"""A scored trace as export request bytes, built in the scoring worker that scored it.

The worker holds the trace's spans as the bytes the collector sent and its scores as the
span field bytes the attach stage merges (`PreparedScores`). Appending those fields to a
span's bytes is what merging them does (protobuf appends repeated fields), so the scored
trace is a concatenation, not a copy and a serialization; the collector's exporters that
send protobuf send it as it is (`serialized_request`). Wire layout, after the OTLP protos:
ExportTraceServiceRequest {1: resource_spans}, ResourceSpans {1: resource, 2:
scope_spans, 3: schema_url}, ScopeSpans {1: scope, 2: spans, 3: schema_url}.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.trace import Trace
from spanscore.pipeline.score_wire import length_delimited

# A trace's spans grouped by the resource and scope they came with: resource bytes, scope
# bytes, span bytes, the ResourceSpans' and the ScopeSpans' schema URLs.
Origins = list[tuple[bytes, bytes, list[bytes], str, str]]

_FIELD_1 = b"\x0a"
_FIELD_2 = b"\x12"
_FIELD_3 = b"\x1a"


def encoded_trace(origins: Origins, trace: Trace, appended: Mapping[int, bytes]) -> bytes:
    """ExportTraceServiceRequest field bytes of `trace`, parsed from `origins` in their
    order; `appended` maps a span object's id() to the field bytes added to that span."""
    out = []
    for (resource, scope, spans, resource_schema, scope_schema), origin in zip(origins, trace.spans_by_origin):
        parsed = origin.scope_spans.spans
        scored = [data + extra if (extra := appended.get(id(span))) else data for data, span in zip(spans, parsed)]
        out.append(_resource_spans(resource, scope, scored, resource_schema, scope_schema))
    return b"".join(out)


def origins_request(origins: Origins) -> bytes:
    """ExportTraceServiceRequest bytes of `origins` as they are (two such requests joined
    are one request holding both)."""
    return b"".join(_resource_spans(*origin) for origin in origins)


def _resource_spans(
    resource: bytes, scope: bytes, spans: list[bytes], resource_schema: str, scope_schema: str
) -> bytes:
    """One `resource_spans` field of an export request: its resource, one scope spans."""
    scope_spans = [length_delimited(_FIELD_1, scope), *(length_delimited(_FIELD_2, data) for data in spans)]
    if scope_schema:
        scope_spans.append(length_delimited(_FIELD_3, scope_schema.encode()))
    resource_spans = [length_delimited(_FIELD_1, resource), length_delimited(_FIELD_2, b"".join(scope_spans))]
    if resource_schema:
        resource_spans.append(length_delimited(_FIELD_3, resource_schema.encode()))
    return length_delimited(_FIELD_1, b"".join(resource_spans))


def request_origins(data: bytes) -> Origins:
    """The origins of ExportTraceServiceRequest bytes, one per scope spans."""
    origins: Origins = []
    for resource_spans in ExportTraceServiceRequest.FromString(data).resource_spans:
        resource = resource_spans.resource.SerializeToString()
        for scope_spans in resource_spans.scope_spans:
            spans = [span.SerializeToString() for span in scope_spans.spans]
            scope = scope_spans.scope.SerializeToString()
            origins.append((resource, scope, spans, resource_spans.schema_url, scope_spans.schema_url))
    return origins
