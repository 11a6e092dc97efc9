"""Rebuilds OTLP export requests from assembled traces for the exporters."""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

from spanscore.core.trace import Trace


def serialized_request(traces: list[Trace]) -> bytes:
    """The serialized request holding every span of `traces`: those a scoring worker
    encoded as their bytes (concatenated protobuf messages merge, so the bytes of
    requests add up to one request), the rest built here and serialized."""
    built = [trace for trace in traces if trace.encoded is None]
    head = build_request(built).SerializeToString() if built else b""
    if len(built) == len(traces):
        return head
    return head + b"".join([trace.encoded for trace in traces if trace.encoded is not None])


def build_request(traces: Iterable[Trace]) -> ExportTraceServiceRequest:
    """One request holding every span of `traces`, each under its original resource and scope.

    Spans that arrived in the same ResourceSpans/ScopeSpans share one output entry again,
    so a batch of traces from one client costs one resource and one scope copy, not one
    per trace. A trace a scoring worker encoded is parsed from its bytes (`serialized_request`
    sends them as they are).
    """
    request = ExportTraceServiceRequest()
    resources: dict[int, ResourceSpans] = {}
    scopes: dict[int, ScopeSpans] = {}
    for trace in traces:
        if trace.encoded is not None:
            request.MergeFromString(trace.encoded)
            continue
        for origin, positions in trace.spans_by_origin.items():
            out_scope = scopes.get(id(origin))
            if out_scope is None:
                source = origin.resource_spans
                out_resource = resources.get(id(source))
                if out_resource is None:
                    out_resource = request.resource_spans.add()
                    out_resource.resource.CopyFrom(source.resource)
                    out_resource.schema_url = source.schema_url
                    resources[id(source)] = out_resource
                out_scope = out_resource.scope_spans.add()
                out_scope.scope.CopyFrom(origin.scope_spans.scope)
                out_scope.schema_url = origin.scope_spans.schema_url
                scopes[id(origin)] = out_scope
            spans = origin.scope_spans.spans
            if len(positions) == len(spans):  # the whole ScopeSpans is this trace's
                out_scope.spans.extend(spans)
            else:
                out_scope.spans.extend([spans[i] for i in positions])
    return request
