"""Phoenix's span JSON (`GET /v1/projects/{id}/spans`) as OTLP spans, field by field.

The JSON here has the shape Phoenix 20.26.1 answers (tests/e2e/test_phoenix_backfill.py
pulls the same from a real Phoenix and scores it as the file it came from scores).
"""

from __future__ import annotations

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanscore.offline.phoenix_labels import PhoenixError
from spanscore.offline.phoenix_spans import trace_request

TRACE = "f9d8d09cee9fbf1ae01ac6c885a2eb8b"
ROOT, CHILD = "52a6caebebadb975", "18f1fd404f7a0b86"


def phoenix_span(span_id: str, parent: str | None, **fields) -> dict:
    return {
        "id": "U3Bhbjox",
        "name": "invoke_agent",
        "context": {"trace_id": TRACE, "span_id": span_id},
        "span_kind": "AGENT",
        "parent_id": parent,
        "start_time": "2023-11-14T22:13:20+00:00",
        "end_time": "2023-11-14T22:13:20.001000+00:00",
        "status_code": "UNSET",
        "status_message": "",
        "attributes": {},
        "events": [],
        **fields,
    }


def values(span: Span) -> dict:
    def plain(value):
        kind = value.WhichOneof("value")
        if kind == "array_value":
            return [plain(v) for v in value.array_value.values]
        return getattr(value, kind)

    return {a.key: plain(a.value) for a in span.attributes}


def test_ids_times_status_attributes_and_events_as_phoenix_keeps_them():
    root = phoenix_span(
        ROOT,
        None,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "n.int": 7,
            "n.float": 0.5,
            "n.whole_float": 1.0,
            "n.bool": True,
            "n.list": ["a", "b"],
            "n.ints": [1, 2],
            "n.none": None,
            "n.huge": 2**70,
            "eval.coherence.score": 0.7,
        },
    )
    child = phoenix_span(
        CHILD,
        ROOT,
        name="chat",
        span_kind="LLM",
        start_time="2023-11-14T22:13:20.000001Z",
        end_time="2023-11-14T23:13:20.999999+01:00",
        status_code="ERROR",
        status_message="bad",
        attributes={"openinference.span.kind": "TOOL"},
        events=[
            {
                "name": "exception",
                "timestamp": "2023-11-14T22:13:20.001235+00:00",
                "attributes": {"exception.message": "boom"},
            }
        ],
    )
    request = trace_request([root, child])
    [resource_spans] = request.resource_spans
    assert not resource_spans.resource.attributes  # Phoenix keeps no resource
    first, second = resource_spans.scope_spans[0].spans
    assert (first.trace_id.hex(), first.span_id.hex(), first.parent_span_id) == (TRACE, ROOT, b"")
    assert (second.span_id.hex(), second.parent_span_id.hex(), second.name) == (CHILD, ROOT, "chat")
    # 2023-11-14T22:13:20Z is 1,700,000,000 s; microseconds exact, offsets applied.
    assert first.start_time_unix_nano == 1_700_000_000_000_000_000
    assert first.end_time_unix_nano == 1_700_000_000_001_000_000
    assert second.start_time_unix_nano == 1_700_000_000_000_001_000
    assert second.end_time_unix_nano == 1_700_000_000_999_999_000
    assert first.status.code == Status.STATUS_CODE_UNSET and first.status.message == ""
    assert (second.status.code, second.status.message) == (Status.STATUS_CODE_ERROR, "bad")
    assert first.kind == second.kind == Span.SPAN_KIND_INTERNAL
    assert values(first) == {
        "gen_ai.operation.name": "invoke_agent",
        "n.int": 7,
        "n.float": 0.5,
        "n.whole_float": 1.0,
        "n.bool": True,
        "n.list": ["a", "b"],
        "n.ints": [1, 2],
        "n.huge": str(2**70),  # past int64: kept as text
        "eval.coherence.score": 0.7,
        "openinference.span.kind": "AGENT",  # Phoenix's kind, as its own OTLP export gives it
    }
    whole = next(a for a in first.attributes if a.key == "n.whole_float")
    assert whole.value.WhichOneof("value") == "double_value"  # 1.0 stays a double
    assert values(second) == {"openinference.span.kind": "TOOL"}  # sent with the span: kept as sent
    [event] = second.events
    assert (event.name, event.time_unix_nano) == ("exception", 1_700_000_000_001_235_000)
    assert values(event) == {"exception.message": "boom"}


def test_nested_attributes_are_flattened_back_to_their_keys():
    nested = {
        "llm": {
            "input_messages": [
                {"message": {"role": "user", "content": "hi"}},
                {"message": {"role": "assistant", "content": "hello"}},
            ],
            "model_name": "gpt-4o",
        },
        "tag": {"tags": ["a", "b"]},
    }
    [span] = trace_request([phoenix_span(ROOT, None, attributes=nested)]).resource_spans[0].scope_spans[0].spans
    assert values(span) == {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "hi",
        "llm.input_messages.1.message.role": "assistant",
        "llm.input_messages.1.message.content": "hello",
        "llm.model_name": "gpt-4o",
        "tag.tags": ["a", "b"],
        "openinference.span.kind": "AGENT",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"context": {"trace_id": "abc", "span_id": ROOT}}, "id 'abc' is not 32 hex digits"),
        ({"context": {"trace_id": TRACE, "span_id": "zz" * 8}}, "is not 16 hex digits"),
        ({"parent_id": "123"}, "id '123' is not 16 hex digits"),
        ({"start_time": "yesterday"}, "time 'yesterday' is not ISO 8601"),
        ({"start_time": 17}, "time 17 is not ISO 8601 text"),
        ({"attributes": ["a"]}, "attributes are not an object"),
        ({"events": ["a"]}, "an event that is not an object"),
    ],
)
def test_a_field_that_cannot_be_read_is_one_line(fields, message):
    with pytest.raises(PhoenixError, match="Phoenix's span") as raised:
        trace_request([phoenix_span(ROOT, None, **fields)])
    assert message in str(raised.value) and "\n" not in str(raised.value)
