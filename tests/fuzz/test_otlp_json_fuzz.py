"""The OTLP/JSON decoder the HTTP receiver uses, fuzzed.

Whatever the body, `decode_request` returns a request or raises `OtlpJsonError` with a
short message (the receiver answers 400 with it and logs it); any other exception would
reach aiohttp as a 500. What it accepts reads back unchanged through `encode_request`,
and a valid request written by protobuf's own JSON mapping (ids turned to hex, in
either field-name spelling) decodes to exactly the same message.
"""

from __future__ import annotations

import base64
import json

from google.protobuf import json_format
from hypothesis import event, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_json import OtlpJsonError, decode_request, encode_request
from tests.support.fuzz_strategies import (
    fixture_documents,
    json_text,
    json_values,
    mutated,
    otlp_shaped,
    requests,
    text_mutated,
)

# An error message is answered and logged: bounded, whatever the input (ids and causes
# are quoted cut short to 200 characters).
MAX_MESSAGE = 400


def decode_or_reject(body: bytes | str) -> ExportTraceServiceRequest | None:
    """Decode `body`; None when rejected the documented way. Any other exception fails the test."""
    try:
        request = decode_request(body)
    except OtlpJsonError as exc:
        message = str(exc)
        assert message and len(message) < MAX_MESSAGE, message[:1000]
        event(f"rejected: {message.split(':')[0]}")
        return None
    assert isinstance(request, ExportTraceServiceRequest)
    event("decoded")
    # What was accepted is a request the collector can write and read again.
    assert _same(decode_request(encode_request(request)), request)
    return request


def _same(a: ExportTraceServiceRequest, b: ExportTraceServiceRequest) -> bool:
    # Compared as bytes: NaN attributes are equal to themselves there, not as floats.
    return a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values(), otlp_shaped()))
def test_any_json_value_decodes_or_is_an_otlp_json_error(value):
    decode_or_reject(json_text(value).encode())


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        st.integers(4290, 4400).map(lambda n: b"7" * n),  # number literals past Python's int conversion limit
        st.sampled_from(
            [
                b"[" * 20_000,
                b'{"a":' * 3000 + b"1" + b"}" * 3000,
                b"\xef\xbb\xbf{}",
                b"\xff\xfe{\x00}\x00",
                b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":' + b"9" * 5000 + b"}]}]}]}",
            ]
        ),
    )
)
def test_any_bytes_decode_or_are_an_otlp_json_error(body):
    decode_or_reject(body)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(fixture_documents()).flatmap(lambda line: mutated(json.loads(line))))
def test_mutated_captured_requests_decode_or_are_an_otlp_json_error(document):
    decode_or_reject(json_text(document).encode())


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(fixture_documents()).flatmap(text_mutated))
def test_mutated_request_text_decodes_or_is_an_otlp_json_error(text):
    decode_or_reject(text.encode())


def test_captured_requests_all_decode():
    # The mutations above start from valid documents: all of them are.
    documents = fixture_documents()
    assert len(documents) >= 20
    for line in documents:
        request = decode_request(line)
        assert request.resource_spans and _same(decode_request(encode_request(request)), request)


def _hex_ids(node, keys: tuple[str, ...]) -> None:
    for key in keys:
        if key in node:
            node[key] = base64.b64decode(node[key]).hex()


def protobuf_json_with_hex_ids(request: ExportTraceServiceRequest, proto_names: bool) -> str:
    """Protobuf's canonical JSON mapping, with the one OTLP/JSON difference applied by hand."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True, preserving_proto_field_name=proto_names)
    rs_key, ss_key = ("resource_spans", "scope_spans") if proto_names else ("resourceSpans", "scopeSpans")
    ids = ("trace_id", "span_id", "parent_span_id") if proto_names else ("traceId", "spanId", "parentSpanId")
    for resource_spans in document.get(rs_key, []):
        for scope_spans in resource_spans.get(ss_key, []):
            for span in scope_spans.get("spans", []):
                _hex_ids(span, ids)
                for link in span.get("links", []):
                    _hex_ids(link, ids[:2])
    return json.dumps(document)


@settings(max_examples=120, deadline=None)
@given(requests(), st.booleans())
def test_a_valid_request_round_trips_through_otlp_json(request, proto_names):
    decoded = decode_request(protobuf_json_with_hex_ids(request, proto_names))
    assert _same(decoded, request)
    assert _same(decode_request(encode_request(request)), request)
    # The ids left as the right-length hex strings OTLP/JSON specifies.
    span = json.loads(encode_request(request))["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
    assert bytes.fromhex(span["traceId"]) == request.resource_spans[0].scope_spans[0].spans[0].trace_id
