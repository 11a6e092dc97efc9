"""Malformed, oversized and hostile requests get clear errors and harm nobody else."""

from __future__ import annotations

import gzip
import json
import logging
import urllib.error
import urllib.request

import grpc
import pytest
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from spanscore.core.otlp_json import encode_request
from spanscore.core.otlp_protobuf import TOO_DEEP
from tests.support.otlp_client import grpc_export, post
from tests.support.running import sink_config, wait_until
from tests.support.spans import good_request, new_trace_id, request_of, span

LIMIT = 64 * 1024


@pytest.fixture
def collector(sink, start_collector):
    config = (
        sink_config(sink)
        .replace("grpc: {endpoint: 127.0.0.1:0}", "grpc: {endpoint: 127.0.0.1:0, max_recv_msg_size_mib: 0.0625}")
        .replace("http: {endpoint: 127.0.0.1:0}", f"http: {{endpoint: 127.0.0.1:0, max_request_body_size: {LIMIT}}}")
    )
    return start_collector(config)


def rpc_status(body: bytes, content_type: str) -> status_pb2.Status:
    if content_type == "application/json":
        document = json.loads(body)
        return status_pb2.Status(code=document.get("code", 0), message=document.get("message", ""))
    return status_pb2.Status.FromString(body)


def assert_still_serving(collector, sink, name: str) -> None:
    status, _, _ = post(collector.http_port, good_request(name).SerializeToString(), "application/x-protobuf")
    assert status == 200
    grpc_export(collector.grpc_port, good_request(name + " via grpc").SerializeToString())
    assert wait_until(lambda: {name, name + " via grpc"} <= {s.name for s in sink.spans()})


def test_truncated_protobuf_is_400_with_a_status_message(collector, sink):
    body = good_request("x").SerializeToString()[:-7]
    status, headers, payload = post(collector.http_port, body, "application/x-protobuf")
    assert status == 400 and headers["Content-Type"] == "application/x-protobuf"
    assert "malformed ExportTraceServiceRequest" in rpc_status(payload, "application/x-protobuf").message
    assert_still_serving(collector, sink, "after truncated")


def test_invalid_json_is_400_answered_in_json(collector, sink):
    status, headers, payload = post(collector.http_port, b'{"resourceSpans": [', "application/json")
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert "invalid JSON" in rpc_status(payload, "application/json").message
    status, _, payload = post(
        collector.http_port,
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
        "application/json",
    )
    assert status == 400 and "is not hex" in rpc_status(payload, "application/json").message
    status, _, payload = post(collector.http_port, b'{"resourceSpans": 5}', "application/json")
    assert status == 400 and "not an OTLP trace export request" in rpc_status(payload, "application/json").message
    assert_still_serving(collector, sink, "after bad json")


def test_unknown_json_fields_are_ignored(collector, sink):
    document = json.loads(encode_request(good_request("with extras")))
    document["somethingNew"] = {"x": 1}
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["futureField"] = [1, 2]
    status, _, _ = post(collector.http_port, json.dumps(document).encode(), "application/json")
    assert status == 200
    assert wait_until(lambda: "with extras" in {s.name for s in sink.spans()})


def test_wrong_content_type_is_415(collector, sink):
    status, _, payload = post(collector.http_port, b"hello", "text/plain")
    assert status == 415 and b"application/x-protobuf" in payload
    status, _, _ = post(
        collector.http_port, good_request("x").SerializeToString(), "application/x-protobuf", encoding="br"
    )
    assert status == 415
    assert_still_serving(collector, sink, "after 415")


def test_a_long_content_type_or_encoding_is_quoted_short(collector, sink, caplog):
    caplog.set_level(logging.INFO)
    body = good_request("x").SerializeToString()
    status, _, payload = post(collector.http_port, body, "application/x-protobuf", encoding="x" * 7000)
    assert status == 415 and len(payload) < 400
    assert "'xxxxxxxx" in rpc_status(payload, "application/x-protobuf").message and "(7000 characters)" in str(payload)
    status, _, payload = post(collector.http_port, body, "text/" + "y" * 7000)
    assert status == 415 and len(payload) < 400 and b"(7005 characters)" in payload
    assert "x" * 201 not in caplog.text and "y" * 201 not in caplog.text
    assert_still_serving(collector, sink, "after long headers")


def test_oversized_body_is_413(collector, sink):
    big = request_of([span(new_trace_id(), "big", attributes={"blob": "x" * (LIMIT + 10)})]).SerializeToString()
    status, _, payload = post(collector.http_port, big, "application/x-protobuf")
    assert status == 413 and "exceeds the limit" in rpc_status(payload, "application/x-protobuf").message
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, big)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_still_serving(collector, sink, "after oversized")


def test_gzip_bomb_is_413_without_inflating_it(collector, sink):
    bomb = gzip.compress(b"\x00" * (256 * 2**20), compresslevel=9)  # 256 MiB of zeros in ~250 KiB
    assert len(bomb) > LIMIT  # also over the raw limit: check a small bomb too
    small_bomb = gzip.compress(b"\x00" * (8 * 2**20), compresslevel=9)
    assert len(small_bomb) < LIMIT
    for body in (bomb, small_bomb):
        status, _, _ = post(collector.http_port, body, "application/x-protobuf", encoding="gzip")
        assert status == 413
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, good_request("x" * (LIMIT * 4)).SerializeToString(), grpc.Compression.Gzip)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert_still_serving(collector, sink, "after bombs")


def test_corrupt_gzip_is_400(collector, sink):
    body = gzip.compress(good_request("x").SerializeToString())
    for broken in (body[:-10], b"not gzip at all"):
        status, _, _ = post(collector.http_port, broken, "application/x-protobuf", encoding="gzip")
        assert status == 400
    status, _, _ = post(collector.http_port, body, "application/x-protobuf", encoding="gzip")
    assert status == 200


def test_malformed_grpc_request_is_invalid_argument(collector, sink):
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, b"\x0a\xff\xff\xff\x0f garbage")
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ExportTraceServiceRequest" in error.value.details()
    assert_still_serving(collector, sink, "after grpc garbage")


def test_invalid_ids_are_rejected_by_partial_success(collector, sink):
    mixed = request_of([span(new_trace_id(), "valid"), span(b"\x01" * 3, "short trace id")])
    status, _, payload = post(collector.http_port, mixed.SerializeToString(), "application/x-protobuf")
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(payload).partial_success
    assert partial.rejected_spans == 1 and "invalid trace_id" in partial.error_message
    response = grpc_export(collector.grpc_port, mixed.SerializeToString())
    assert response.partial_success.rejected_spans == 1
    assert wait_until(lambda: [s.name for s in sink.spans()].count("valid") == 2)

    all_bad = request_of([span(b"\x00" * 16, "zero id")])
    status, _, payload = post(collector.http_port, all_bad.SerializeToString(), "application/x-protobuf")
    assert status == 400 and "all 1 spans rejected" in rpc_status(payload, "application/x-protobuf").message
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, all_bad.SerializeToString())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "zero id" not in {s.name for s in sink.spans()}


def test_other_paths_and_methods(collector):
    status, _, _ = post(collector.http_port, b"", "application/x-protobuf", path="/v1/metrics")
    assert status == 404
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"http://127.0.0.1:{collector.http_port}/v1/traces", timeout=5)
    assert error.value.code == 405


def test_deeply_nested_json_is_400_and_the_answer_stays_short(collector, sink):
    # json's own recursion limit: 30,000 nested arrays (60 KB, under the body limit).
    status, _, payload = post(collector.http_port, b"[" * 30_000 + b"]" * 30_000, "application/json")
    assert status == 400 and rpc_status(payload, "application/json").message == "invalid JSON: nested too deeply"
    # Within json's limit but deeper than OTLP's 100 levels of messages.
    value = {"stringValue": "x"}
    for _ in range(150):
        value = {"arrayValue": {"values": [value]}}
    document = json.loads(encode_request(good_request("deep")))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = [{"key": "k", "value": value}]
    status, _, payload = post(collector.http_port, json.dumps(document).encode(), "application/json")
    assert (status, rpc_status(payload, "application/json").message) == (400, TOO_DEEP)
    assert_still_serving(collector, sink, "after deep json")


# The deepest a span attribute's value may nest, per kind (docs/configuration.md).
DEEPEST = {"arrayValue": 47, "kvlistValue": 31}


def nested(kind: str, levels: int) -> AnyValue:
    value = bottom = AnyValue()
    for _ in range(levels):
        value = value.array_value.values.add() if kind == "arrayValue" else value.kvlist_value.values.add(key="k").value
    value.string_value = "bottom"
    return bottom


def depth(value: AnyValue) -> int:
    levels = 0
    while value.WhichOneof("value") in ("array_value", "kvlist_value"):
        values = value.array_value.values if value.HasField("array_value") else value.kvlist_value.values
        value = values[0] if value.HasField("array_value") else values[0].value
        levels += 1
    return levels


@pytest.mark.parametrize("kind", DEEPEST)
@pytest.mark.parametrize("protocol", ["protobuf", "json", "grpc"])
def test_attribute_values_nested_to_the_limit_are_taken_deeper_ones_refused_in_words(protocol, kind, collector, sink):
    def send(levels: int) -> tuple[bool, str]:
        deep = span(new_trace_id(), f"{kind} {levels} deep over {protocol}")
        deep.attributes.add(key="nested").value.CopyFrom(nested(kind, levels))
        request = request_of([deep])
        if protocol == "grpc":
            try:
                grpc_export(collector.grpc_port, request.SerializeToString())
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                return False, error.details()
            return True, ""
        content_type = "application/x-protobuf" if protocol == "protobuf" else "application/json"
        body = request.SerializeToString() if protocol == "protobuf" else encode_request(request).encode()
        status, _, payload = post(collector.http_port, body, content_type)
        assert status in (200, 400)
        return status == 200, "" if status == 200 else rpc_status(payload, content_type).message

    deepest = DEEPEST[kind]
    assert send(deepest) == (True, "")
    assert send(deepest + 1) == (False, TOO_DEEP)
    name = f"{kind} {deepest} deep over {protocol}"
    assert wait_until(lambda: name in {s.name for s in sink.spans()})
    taken = next(s for s in sink.spans() if s.name == name)
    assert depth(taken.attributes[0].value) == deepest


def test_a_long_malformed_id_is_not_echoed_whole(collector, sink, caplog):
    long_id = "z" * 1000
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": long_id}]}]}]}).encode()
    status, _, payload = post(collector.http_port, body, "application/json")
    message = rpc_status(payload, "application/json").message
    assert status == 400 and "is not hex" in message and "(1002 characters)" in message
    assert len(message) < 300
    assert long_id not in caplog.text
    # The same over protobuf: a 1,000-byte trace id is quoted cut short when rejected.
    request = request_of([span(b"\x07" * 1000, "huge id")])
    status, _, payload = post(collector.http_port, request.SerializeToString(), "application/x-protobuf")
    message = rpc_status(payload, "application/x-protobuf").message
    assert status == 400 and "invalid trace_id" in message and "(2000 characters)" in message
    assert len(message) < 400 and "07" * 1000 not in caplog.text
    assert_still_serving(collector, sink, "after long ids")
