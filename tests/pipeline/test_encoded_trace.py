"""A scored trace encoded by concatenation is the request the collector would build and serialize."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.export_request import build_request, serialized_request
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.pipeline.encoded_trace import encoded_trace
from spanscore.pipeline.score_wire import span_attributes, span_event
from tests.support.spans import new_span_id, new_trace_id, request_of, span


def received(request: ExportTraceServiceRequest) -> list[Trace]:
    """The request's traces as the assembler holds them (spans by origin and position)."""
    traces: dict[bytes, Trace] = {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            origin = ScopeOrigin(resource_spans, scope_spans)
            for position, one in enumerate(scope_spans.spans):
                traces.setdefault(one.trace_id, Trace(one.trace_id, 0.0)).add(position, one, origin)
    return list(traces.values())


def two_origin_request() -> ExportTraceServiceRequest:
    trace_id, root_id = new_trace_id(), new_span_id()
    first = request_of([span(trace_id, "agent", span_id=root_id), span(trace_id, "llm", parent=root_id)])
    second = request_of([span(trace_id, "tool", parent=root_id)], service="tools", resource_attributes={"k": "v"})
    first.resource_spans[0].schema_url = "https://opentelemetry.io/schemas/1.26.0"
    second.resource_spans[0].scope_spans[0].schema_url = "https://opentelemetry.io/schemas/1.27.0"
    first.resource_spans.extend(second.resource_spans)
    return first


def origins_of(trace: Trace) -> list:
    """What the collector sends a scoring worker of `trace`."""
    return [
        (
            origin.resource.SerializeToString(),
            origin.scope_spans.scope.SerializeToString(),
            [origin.scope_spans.spans[p].SerializeToString() for p in positions],
            origin.resource_spans.schema_url,
            origin.scope_spans.schema_url,
        )
        for origin, positions in trace.spans_by_origin.items()
    ]


def test_appended_fields_land_where_merging_them_would():
    scores = span_attributes([("eval.coherence.score", 0.75), ("eval.coherence.label", "pass")])
    finding = span_event(1_700_000_000_000_000_000, "gen_ai.evaluation.result", [("gen_ai.evaluation.name", "x")])
    request = two_origin_request()
    (encoded_copy,) = received(request)
    (merged_copy,) = received(ExportTraceServiceRequest.FromString(request.SerializeToString()))
    # The anchor gets the scores, the tool span two findings, in that order.
    tool = [s for s, _ in encoded_copy.spans() if s.name == "tool"][0]
    appended = {id(encoded_copy.anchor): scores, id(tool): finding + finding}
    encoded = encoded_trace(origins_of(encoded_copy), encoded_copy, appended)
    merged_copy.anchor.MergeFromString(scores)
    merged_tool = [s for s, _ in merged_copy.spans() if s.name == "tool"][0]
    merged_tool.MergeFromString(finding)
    merged_tool.MergeFromString(finding)
    expected = build_request([merged_copy])
    assert ExportTraceServiceRequest.FromString(encoded) == expected
    assert len(expected.resource_spans) == 2 and expected.resource_spans[0].schema_url.endswith("1.26.0")
    assert expected.resource_spans[1].scope_spans[0].schema_url.endswith("1.27.0")
    assert len(merged_tool.events) == 2 and len(merged_copy.anchor.attributes) == 2


def test_a_request_of_encoded_and_built_traces_holds_every_span_once():
    built, encoded = received(request_of([span(new_trace_id(), "a")])), received(two_origin_request())
    encoded[0].encoded = encoded_trace(origins_of(encoded[0]), encoded[0], {})
    mixed = ExportTraceServiceRequest.FromString(serialized_request([*built, *encoded]))
    names = [s.name for rs in mixed.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(names) == ["a", "agent", "llm", "tool"]
    # An exporter that builds requests (file, debug) gets the same spans from the bytes.
    assert build_request([*built, *encoded]) == mixed
    assert serialized_request(built) == build_request(built).SerializeToString()
    resource = ResourceSpans()
    resource.CopyFrom(mixed.resource_spans[-1])
    assert {kv.key for kv in resource.resource.attributes} == {"service.name", "k"}
