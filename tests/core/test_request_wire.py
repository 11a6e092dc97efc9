"""Spans sliced from a request's bytes are the spans the parser read from them."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.request_wire import RequestWire
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.intake import Intake
from spanscore.pipeline.score_wire import varint
from spanscore.pipeline.settings import PipelineSettings
from tests.support.spans import new_span_id, new_trace_id, request_of, span


def two_resources() -> ExportTraceServiceRequest:
    trace_id = new_trace_id()
    request = request_of([span(trace_id, "a", attributes={"k": "v" * 300}), span(trace_id, "b")])
    other = request_of([span(trace_id, "c", parent=new_span_id())], service="other")
    other.resource_spans[0].scope_spans.add().spans.add(name="d", trace_id=trace_id, span_id=new_span_id())
    request.resource_spans.extend(other.resource_spans)
    return request


def sliced(data: bytes, request: ExportTraceServiceRequest) -> list:
    wire = RequestWire(data)
    return [
        wire.origin(r, s, len(scope_spans.spans))
        for r, resource_spans in enumerate(request.resource_spans)
        for s, scope_spans in enumerate(resource_spans.scope_spans)
    ]


def test_every_span_resource_and_scope_is_sliced_as_sent():
    request = two_resources()
    data = request.SerializeToString()
    places = sliced(data, request)
    scopes = [(rs, ss) for rs in request.resource_spans for ss in rs.scope_spans]
    assert len(places) == len(scopes) == 3
    for (resource, scope, spans), (resource_spans, scope_spans) in zip(places, scopes):
        assert resource == resource_spans.resource.SerializeToString()
        assert scope == scope_spans.scope.SerializeToString()
        assert [Span.FromString(one) for one in spans] == list(scope_spans.spans)
        assert list(spans) == [one.SerializeToString() for one in scope_spans.spans]
    assert places[2][1] == b""  # a scope spans without a scope


def test_unknown_fields_at_every_level_are_passed_over():
    request = two_resources()
    data = bytearray()
    # An unknown request field of each wire type before the resource spans: varint (2),
    # fixed64 (3), fixed32 (4), with a field number above 15, length-delimited (100), and
    # a group (9) holding a varint.
    unknown = b"\x10\x96\x01" + b"\x19" + bytes(8) + b"\x25" + bytes(4) + b"\xa2\x06\x03abc" + b"\x4b\x08\x01\x4c"
    data += unknown
    for resource_spans in request.resource_spans:
        inner = bytearray(unknown)
        for scope_spans in resource_spans.scope_spans:
            scope = unknown + scope_spans.SerializeToString() + unknown
            inner += b"\x12" + varint(len(scope)) + scope
        inner += b"\x0a" + varint(len(resource_spans.resource.SerializeToString()))
        inner += resource_spans.resource.SerializeToString()
        data += b"\x0a" + varint(len(inner)) + inner
    parsed = ExportTraceServiceRequest.FromString(bytes(data))
    assert [s.name for rs in parsed.resource_spans for ss in rs.scope_spans for s in ss.spans] == list("abcd")
    places = sliced(bytes(data), parsed)
    assert [[Span.FromString(one).name for one in spans] for _, _, spans in places] == [["a", "b"], ["c"], ["d"]]


def test_what_cannot_be_sliced_is_left_to_serialization():
    request = request_of([span(new_trace_id(), "a")])
    data = request.SerializeToString()
    resource = request.resource_spans[0].resource.SerializeToString()
    # The resource given in two parts (the parser merges them): no single slice holds it.
    split = request.resource_spans[0].SerializeToString() + b"\x0a" + varint(len(resource)) + resource
    twice = b"\x0a" + varint(len(split)) + split
    assert ExportTraceServiceRequest.FromString(twice).resource_spans[0].scope_spans[0].spans[0].name == "a"
    assert RequestWire(twice).origin(0, 0, 1) is None
    # A group never closed, or cut-off bytes: nothing sliced, nothing raised.
    assert RequestWire(b"\x0b" + data).origin(0, 0, 1) is None
    assert RequestWire(data[:-3]).origin(0, 0, 1) is None
    # Another count of spans, or a place the bytes do not have (another request's): refused.
    assert RequestWire(data).origin(0, 0, 2) is None
    assert RequestWire(data).origin(1, 0, 1) is None and RequestWire(data).origin(0, 1, 1) is None
    assert RequestWire(data).origin(0, 0, 1) is not None


def test_the_intake_keeps_request_bytes_only_for_scoring_workers():
    request = two_resources()
    data = request.SerializeToString()
    for keep in (True, False):
        assembler = Assembler(PipelineSettings(trace_wait=1.0))
        intake = Intake(assembler, PipelineCounts(1000), lambda: 0.0, keep_wire=keep)
        intake.consume(ExportTraceServiceRequest.FromString(data), data)
        (trace,) = assembler.pop_all()
        sent = [origin.as_sent() for origin in trace.spans_by_origin]
        if not keep:
            assert sent == [None, None, None]
            continue
        for (resource, scope, spans), (origin, positions) in zip(sent, trace.spans_by_origin.items()):
            assert resource == origin.resource.SerializeToString()
            assert scope == origin.scope_spans.scope.SerializeToString()
            assert [spans[p] for p in positions] == [origin.scope_spans.spans[p].SerializeToString() for p in positions]
