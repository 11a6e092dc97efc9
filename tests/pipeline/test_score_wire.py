"""Score attributes and events written as wire bytes equal the messages protobuf builds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.pipeline import score_wire
from tests.support.spans import any_value

values = st.one_of(
    st.text(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=False)
)
pairs = st.lists(st.tuples(st.text(), values), max_size=8)


@settings(max_examples=300, deadline=None)
@given(pairs, st.integers(min_value=0, max_value=2**64 - 1), st.text(), pairs)
def test_wire_bytes_merge_into_the_same_span_as_built_messages(attributes, time_ns, name, event_attributes):
    expected = Span(name="root", attributes=[KeyValue(key="k", value=AnyValue(string_value="v"))])
    expected.attributes.extend(KeyValue(key=key, value=any_value(value)) for key, value in attributes)
    expected.events.append(
        Span.Event(
            time_unix_nano=time_ns,
            name=name,
            attributes=[KeyValue(key=k, value=any_value(v)) for k, v in event_attributes],
        )
    )
    merged = Span(name="root", attributes=[KeyValue(key="k", value=AnyValue(string_value="v"))])
    merged.MergeFromString(
        score_wire.span_attributes(attributes) + score_wire.span_event(time_ns, name, event_attributes)
    )
    assert merged == expected


def test_a_lone_surrogate_is_replaced_rather_than_failing():
    span = Span()
    span.MergeFromString(score_wire.span_attributes([("eval.x.explanation", "bad \ud800 text")]))
    assert span.attributes[0].value.string_value == "bad ? text"
