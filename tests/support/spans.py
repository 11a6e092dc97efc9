"""Building OTLP spans and requests by hand, comparing forwarded ones with sent ones, and
reading exported ones back."""

from __future__ import annotations

import os

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

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.evaluation_event import EVALUATION_EVENT
from spanscore.core.provenance import CODE_PROVENANCE


def kv(key: str, value) -> KeyValue:
    return KeyValue(key=key, value=any_value(value))


def any_value(value) -> AnyValue:
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=[kv(k, v) for k, v in value.items()]))
    return AnyValue(string_value=str(value))


EVERY_VALUE_TYPE = {
    "str": "héllo ✓",
    "bool": True,
    "int": -(2**62),
    "double": 3.25,
    "bytes": b"\x00\xffraw",
    "array": ["a", 1, 2.5, False, ["nested"]],
    "kvlist": {"k": "v", "n": {"deep": 7}},
    "empty": None,
}


# What makes a hand-made span an agent run to the normalizer (convention "genai", with
# a user input and a final output): only agent traces are scored by default.
AGENT_ROOT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "Where is my order?"}]}]',
    "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", "content": "It ships today."}]}]',
}


def new_trace_id() -> bytes:
    return os.urandom(16)


def new_span_id() -> bytes:
    return os.urandom(8)


def span(
    trace_id: bytes,
    name: str,
    parent: bytes = b"",
    attributes: dict | None = None,
    start_ns: int = 1_700_000_000_000_000_000,
    span_id: bytes | None = None,
) -> Span:
    return Span(
        trace_id=trace_id,
        span_id=span_id or new_span_id(),
        parent_span_id=parent,
        name=name,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 1_000_000,
        attributes=[kv(k, v) for k, v in (attributes or {}).items()],
    )


def request_of(
    spans: list[Span], service: str = "agent", resource_attributes: dict | None = None
) -> ExportTraceServiceRequest:
    attributes = {"service.name": service, **(resource_attributes or {})}
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[kv(k, v) for k, v in attributes.items()]),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name="tests"), spans=spans)],
            )
        ]
    )


def good_request(name: str):
    return request_of([span(new_trace_id(), name)])


def agent_request(turns: int = 4) -> ExportTraceServiceRequest:
    spans = []
    for turn in range(turns):
        trace_id, root = new_trace_id(), new_span_id()
        spans.append(
            span(
                trace_id,
                "invoke_agent",
                span_id=root,
                attributes={
                    **AGENT_ROOT,
                    "gen_ai.input.messages": f'[{{"role": "user", "content": "question {turn}"}}]',
                    "gen_ai.output.messages": f'[{{"role": "assistant", "content": "answer {turn}"}}]',
                },
            )
        )
        spans += [span(trace_id, f"step {i}", parent=root) for i in range(3)]
    return request_of(spans, service="wal-agent")


def every_field_request() -> ExportTraceServiceRequest:
    """Two traces using every OTLP trace field and every attribute value type."""
    trace_a, trace_b = new_trace_id(), new_trace_id()
    root_a, child_a, root_b = new_span_id(), new_span_id(), new_span_id()
    attributes = [kv(k, v) for k, v in EVERY_VALUE_TYPE.items()]

    def full_span(trace_id, span_id, parent, name, kind):
        return Span(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            trace_state="vendor=a,other=b",
            flags=0x301 if parent else 0x101,
            name=name,
            kind=kind,
            start_time_unix_nano=1_700_000_000_123_456_789,
            end_time_unix_nano=1_700_000_001_987_654_321,
            attributes=attributes,
            dropped_attributes_count=3,
            events=[
                Span.Event(
                    time_unix_nano=1_700_000_000_500_000_000,
                    name="checkpoint",
                    attributes=attributes,
                    dropped_attributes_count=1,
                )
            ],
            dropped_events_count=2,
            links=[
                Span.Link(
                    trace_id=trace_b,
                    span_id=root_b,
                    trace_state="l=1",
                    attributes=attributes,
                    dropped_attributes_count=4,
                    flags=0x101,
                )
            ],
            dropped_links_count=5,
            status=Status(code=Status.STATUS_CODE_ERROR, message="it broke"),
        )

    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[kv("service.name", "every-field"), *attributes], dropped_attributes_count=6
                ),
                schema_url="https://opentelemetry.io/schemas/1.26.0",
                scope_spans=[
                    ScopeSpans(
                        scope=InstrumentationScope(
                            name="scope-one", version="1.2.3", attributes=attributes, dropped_attributes_count=7
                        ),
                        schema_url="https://opentelemetry.io/schemas/1.21.0",
                        spans=[
                            full_span(trace_a, root_a, b"", "root-a", Span.SPAN_KIND_SERVER),
                            full_span(trace_a, child_a, root_a, "child-a", Span.SPAN_KIND_CLIENT),
                        ],
                    ),
                    ScopeSpans(
                        scope=InstrumentationScope(name="scope-two"),
                        spans=[full_span(trace_b, root_b, b"", "root-b", Span.SPAN_KIND_PRODUCER)],
                    ),
                ],
            )
        ]
    )


def without_scores(span: Span) -> Span:
    """A copy of `span` without the attributes and events that scoring adds."""
    clean = Span()
    clean.CopyFrom(span)
    kept = [a for a in clean.attributes if not a.key.startswith("eval.")]
    del clean.attributes[:]
    clean.attributes.extend(kept)
    events = [e for e in clean.events if e.name != EVALUATION_EVENT]
    del clean.events[:]
    clean.events.extend(events)
    return clean


def spans_with_context(requests) -> dict[bytes, tuple[Span, ResourceSpans, ScopeSpans]]:
    """span_id -> (span, its ResourceSpans, its ScopeSpans) over many requests."""
    found = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    found[s.span_id] = (s, resource_spans, scope_spans)
    return found


def assert_forwarded_faithfully(sent_requests, received_requests) -> None:
    """Every sent span arrived once, equal field for field (scores aside), with its
    resource, scope and schema URLs."""
    sent = spans_with_context(sent_requests)
    received = spans_with_context(received_requests)
    received_count = sum(len(ss.spans) for r in received_requests for rs in r.resource_spans for ss in rs.scope_spans)
    assert received_count == len(sent), f"sent {len(sent)} spans, received {received_count}"
    for span_id, (span_sent, rs_sent, ss_sent) in sent.items():
        assert span_id in received, f"span {span_id.hex()} ({span_sent.name}) was not forwarded"
        span_got, rs_got, ss_got = received[span_id]
        assert without_scores(span_got) == span_sent, f"span {span_sent.name} changed in forwarding"
        assert rs_got.resource == rs_sent.resource
        assert rs_got.schema_url == rs_sent.schema_url
        assert ss_got.scope == ss_sent.scope
        assert ss_got.schema_url == ss_sent.schema_url


def exported_span(sink, name):
    matches = [s for s in sink.spans() if s.name == name]
    assert len(matches) == 1, f"expected one exported span named {name!r}, found {len(matches)}"
    return matches[0]


def evaluation_events(span):
    return [attributes_to_dict(e.attributes) for e in span.events if e.name == "gen_ai.evaluation.result"]


def scored_before(trace_id: bytes, name: str, span_id: bytes | None = None) -> Span:
    """An agent root as an earlier spanscore scored it (events without provenance, as
    before they had any): metric `toy` by an older judge and revision, with an
    explanation the new scoring does not write, metric `retired` that is not scored
    again, and an event of the agent's own."""
    root = span(
        trace_id,
        name,
        span_id=span_id,
        attributes={
            **AGENT_ROOT,
            "eval.toy.evaluator": "old-judge",
            "eval.toy.revision": "000000000000",
            "eval.toy.score": 0.1,
            "eval.toy.label": "fail",
            "eval.toy.explanation": "an old verdict",
            "eval.retired.evaluator": "code",
            "eval.retired.revision": "111111111111",
            "eval.retired.score": 0.3,
            "eval.retired.label": "fail",
        },
    )
    for event_name, attributes in [
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "toy", "gen_ai.evaluation.score.value": 0.1}),
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "retired", "gen_ai.evaluation.score.value": 0.3}),
        ("exception", {"exception.message": "the agent's own"}),
    ]:
        root.events.add(name=event_name, attributes=[kv(k, v) for k, v in attributes.items()])
    return root


def assert_rescored(root, span_count: int) -> None:
    """`root`, made by `scored_before`, as scoring it again with the toy metric leaves it."""
    keys = [a.key for a in root.attributes]
    assert len(keys) == len(set(keys))
    evals = {k: v for k, v in attributes_to_dict(root.attributes).items() if k.startswith("eval.")}
    assert evals == {
        "eval.retired.evaluator": "code",  # not scored again: kept as it came
        "eval.retired.revision": "111111111111",
        "eval.retired.score": 0.3,
        "eval.retired.label": "fail",
        "eval.toy.evaluator": "code",
        "eval.toy.revision": CODE_PROVENANCE.revision,
        "eval.toy.score": span_count / 4,
        "eval.toy.label": "pass" if span_count >= 2 else "fail",
        "eval.toy.explanation": f"{span_count} spans",
        "eval.toy.sequence": 1,
    }
    events = [(e.name, attributes_to_dict(e.attributes)) for e in root.events]
    assert events == [
        ("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "retired", "gen_ai.evaluation.score.value": 0.3}),
        ("exception", {"exception.message": "the agent's own"}),
        (
            "gen_ai.evaluation.result",
            {
                "gen_ai.evaluation.name": "toy",
                "eval.evaluator": "code",
                "eval.revision": CODE_PROVENANCE.revision,
                "gen_ai.evaluation.score.value": span_count / 4,
                "gen_ai.evaluation.score.label": "pass" if span_count >= 2 else "fail",
                "gen_ai.evaluation.explanation": f"{span_count} spans",
            },
        ),
    ]
