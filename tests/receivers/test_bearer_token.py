"""Receivers behind `bearertokenauth`: without the token a request is refused (HTTP 401,
gRPC UNAUTHENTICATED) before its body is read, nothing of it reaches the pipeline, and
neither the token nor a presented one is ever logged. A request carrying the credentials
twice is refused on both protocols, whichever value comes first."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import urllib.error
import urllib.request

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.support.bearer_token import TOKEN, WRONG, auth_config
from tests.support.otlp_client import EXPORT
from tests.support.running import wait_until
from tests.support.sdk_export import EXPORTS
from tests.support.spans import good_request

REFUSED = {"no header": None, "wrong token": f"Bearer {WRONG}", "another scheme": f"Basic {TOKEN}", "no scheme": TOKEN}


@pytest.fixture
def collector(sink, start_collector):
    return start_collector(auth_config(sink))


def post(port: int, authorization: str | None, content_length: int | None = None):
    body = good_request("refused?").SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def grpc_export(port: int, authorization: str | None):
    metadata = () if authorization is None else (("authorization", authorization),)
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(
            EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        return export(good_request("refused?").SerializeToString(), metadata=metadata, timeout=10)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_right_token_is_delivered(protocol, collector, sink):
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    result = EXPORTS[protocol](port, f"with a token over {protocol}", headers={"authorization": f"Bearer {TOKEN}"})
    assert result is SpanExportResult.SUCCESS
    assert wait_until(lambda: [s.name for s in sink.spans()] == [f"with a token over {protocol}"])


def test_the_scheme_is_case_insensitive_the_token_is_not(collector, sink):
    assert post(collector.http_port, f"bearer {TOKEN}")[0] == 200
    assert post(collector.http_port, f"Bearer {TOKEN.upper()}")[0] == 401


@pytest.mark.parametrize("presented", REFUSED.values(), ids=REFUSED.keys())
def test_http_without_the_token_gets_401_and_nothing_is_kept(presented, collector, sink):
    status, headers, body = post(collector.http_port, presented)
    assert status == 401
    assert headers["WWW-Authenticate"] == "Bearer"
    assert status_pb2.Status.FromString(body).code == code_pb2.UNAUTHENTICATED
    assert collector.pipeline.counts.received_spans == 0
    assert sink.spans() == []


@pytest.mark.parametrize("presented", REFUSED.values(), ids=REFUSED.keys())
def test_grpc_without_the_token_gets_unauthenticated_and_nothing_is_kept(presented, collector, sink):
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, presented)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert collector.pipeline.counts.received_spans == 0
    assert sink.spans() == []


def test_http_refuses_before_the_body_is_sent(collector):
    announced = 4096
    with socket.create_connection(("127.0.0.1", collector.http_port), timeout=5) as client:
        client.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            b"Authorization: Bearer nope\r\nContent-Length: %d\r\n\r\n" % announced
        )
        reply = client.recv(4096)  # the answer comes while the body is still unsent
        # aiohttp then reads and drops what follows (a lingering close: the client is not
        # reset before it reads the answer); it is never parsed or kept.
        client.sendall(b"\0" * announced)
    assert reply.startswith(b"HTTP/1.1 401")
    assert collector.pipeline.counts.received_spans == 0


def test_an_authorization_header_that_is_not_utf8_gets_401(collector, caplog):
    caplog.set_level(logging.INFO)
    with socket.create_connection(("127.0.0.1", collector.http_port), timeout=5) as client:
        client.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            b"Authorization: Bearer \xff\xfe\xe9t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        reply = b"".join(iter(lambda: client.recv(4096), b""))
    assert reply.startswith(b"HTTP/1.1 401")
    assert b"WWW-Authenticate: Bearer" in reply
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert collector.pipeline.counts.received_spans == 0


def test_grpc_refuses_before_the_message_is_sent(collector):
    release = threading.Event()

    def never_sent():
        release.wait(10)  # the client holds its one message back until the answer came
        yield good_request("held back").SerializeToString()

    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as error:
                export(never_sent(), metadata=(("authorization", "Bearer nope"),), timeout=5)
    finally:
        release.set()
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert collector.pipeline.counts.received_spans == 0


def test_neither_the_token_nor_a_presented_one_is_ever_logged(sink, start_collector, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    collector = start_collector(auth_config(sink))
    for protocol, port in (("grpc", collector.grpc_port), ("http", collector.http_port)):
        for presented, expected in (
            (f"Bearer {WRONG}", SpanExportResult.FAILURE),
            (WRONG, SpanExportResult.FAILURE),
            (f"Bearer {TOKEN}", SpanExportResult.SUCCESS),
        ):
            result = EXPORTS[protocol](port, "logged?", headers={"authorization": presented}, timeout_s=1)
            assert result is expected
    assert wait_until(lambda: len(sink.spans()) == 2)
    collector.stop()
    assert "OTLP/HTTP 401 missing or invalid credentials" in caplog.text  # logged, without credentials
    assert "OTLP/gRPC UNAUTHENTICATED missing or invalid credentials" in caplog.text
    captured = capfd.readouterr()
    for text in (caplog.text, captured.out, captured.err):
        assert TOKEN not in text and WRONG not in text


TWICE = {
    "the token, then a wrong one": (f"Bearer {TOKEN}", f"Bearer {WRONG}"),
    "a wrong one, then the token": (f"Bearer {WRONG}", f"Bearer {TOKEN}"),
    "the token twice": (f"Bearer {TOKEN}", f"Bearer {TOKEN}"),
}
AMBIGUOUS = "more than one authorization header; send the credentials once"


@pytest.mark.parametrize("values", TWICE.values(), ids=TWICE.keys())
def test_credentials_sent_twice_are_refused_over_http_and_grpc(values, collector, sink):
    connection = http.client.HTTPConnection("127.0.0.1", collector.http_port, timeout=10)
    try:
        connection.putrequest("POST", "/v1/traces")
        body = good_request("sent twice").SerializeToString()
        for name, value in (("Content-Type", "application/x-protobuf"), ("Content-Length", str(len(body)))):
            connection.putheader(name, value)
        for value in values:
            connection.putheader("Authorization", value)
        connection.endheaders(body)
        response = connection.getresponse()
        status, challenge, payload = response.status, response.getheader("WWW-Authenticate"), response.read()
    finally:
        connection.close()
    assert (status, challenge) == (401, "Bearer")
    assert status_pb2.Status.FromString(payload) == status_pb2.Status(code=code_pb2.UNAUTHENTICATED, message=AMBIGUOUS)

    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as error:
            export(body, metadata=tuple(("authorization", value) for value in values), timeout=10)
    assert (error.value.code(), error.value.details()) == (grpc.StatusCode.UNAUTHENTICATED, AMBIGUOUS)
    assert collector.pipeline.counts.received_spans == 0 and sink.spans() == []
