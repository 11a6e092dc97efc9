"""The receivers let go of clients that hold them: slow or silent HTTP connections are
closed after their timeouts, connections past `max_connections` are refused, a gRPC
stream without its message ends at `read_timeout`, and gRPC's stream, connection,
idle and ping limits hold. Real sockets on loopback, timeouts of a fraction of a second."""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest
from google.rpc import status_pb2

from spanscore.receivers.limits import GrpcLimits, HttpLimits
from tests.support.otlp_client import EXPORT, grpc_export
from tests.support.running import sink_config, wait_until
from tests.support.spans import good_request

PROTOBUF = "application/x-protobuf"


def limited(sink, http: str = "", grpc_settings: str = "") -> str:
    return (
        sink_config(sink)
        .replace("http: {endpoint: 127.0.0.1:0}", f"http: {{endpoint: 127.0.0.1:0, {http}}}")
        .replace("grpc: {endpoint: 127.0.0.1:0}", f"grpc: {{endpoint: 127.0.0.1:0, {grpc_settings}}}")
    )


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def read_until_closed(s: socket.socket, timeout_s: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection; fails if it does not."""
    s.settimeout(timeout_s)
    received = b""
    while chunk := s.recv(65536):
        received += chunk
    return received


def request_bytes(body: bytes, keep_alive: bool = True) -> bytes:
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {PROTOBUF}\r\n"
        f"Content-Length: {len(body)}\r\n{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}\r\n"
    )
    return head.encode() + body


def test_the_defaults_are_the_documented_ones():
    http, grpc_limits = HttpLimits(), GrpcLimits()
    assert (http.read_header_timeout, http.read_timeout, http.idle_timeout, http.max_connections) == (
        60.0,
        60.0,
        60.0,
        1000,
    )
    server, policy = grpc_limits.keepalive.server_parameters, grpc_limits.keepalive.enforcement_policy
    assert (grpc_limits.max_concurrent_streams, grpc_limits.max_connections, grpc_limits.read_timeout) == (
        100,
        1000,
        60,
    )
    assert (server.max_connection_idle, server.max_connection_age, server.time, server.timeout) == (300, 0, 7200, 20)
    assert (policy.min_time, policy.permit_without_stream) == (300, False)


def test_headers_sent_slowly_and_silent_connections_are_closed_with_408(sink, start_collector):
    collector = start_collector(limited(sink, http="read_header_timeout: 500ms"))
    slow = [connect(collector.http_port) for _ in range(10)]
    silent = [connect(collector.http_port) for _ in range(10)]
    began = time.monotonic()
    for s in slow:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for _ in range(4):  # a header byte every 200 ms: still sending when the timeout strikes
        time.sleep(0.2)
        for s in slow:
            try:
                s.sendall(b"X")
            except OSError:
                pass  # already closed
    answers = [read_until_closed(s) for s in slow + silent]
    elapsed = time.monotonic() - began
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers
    assert elapsed < 3.0
    assert collector.service.receivers[0].http.connections.timed_out == 20
    for s in slow + silent:
        s.close()


def test_a_kept_alive_connection_serves_requests_until_it_idles_past_idle_timeout(sink, start_collector):
    collector = start_collector(limited(sink, http="idle_timeout: 500ms"))
    with connect(collector.http_port) as s:
        for name in ("first", "second on the same connection"):
            s.sendall(request_bytes(good_request(name).SerializeToString()))
            assert s.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.2)  # within idle_timeout
        began = time.monotonic()
        assert read_until_closed(s) == b""  # closed without an answer: no request was under way
        assert 0.2 <= time.monotonic() - began < 2.0
    assert wait_until(lambda: len(sink.spans()) == 2)


def test_a_body_that_stops_arriving_gets_408_after_read_timeout(sink, start_collector):
    collector = start_collector(limited(sink, http="read_timeout: 500ms"))
    body = good_request("never finished").SerializeToString()
    with connect(collector.http_port) as s:
        s.sendall(request_bytes(body)[: -len(body) // 2])
        began = time.monotonic()
        answer = read_until_closed(s)
        elapsed = time.monotonic() - began
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    message = status_pb2.Status.FromString(answer.split(b"\r\n\r\n", 1)[1]).message
    assert message == "the request body did not arrive within read_timeout (0.5s)"
    assert elapsed < 2.0
    assert collector.pipeline.counts.received_spans == 0


def test_connections_past_max_connections_are_refused_with_503(sink, start_collector):
    collector = start_collector(limited(sink, http="max_connections: 3"))
    held = [connect(collector.http_port) for _ in range(3)]
    connections = collector.service.receivers[0].http.connections
    assert wait_until(lambda: len(connections.open) == 3)
    with connect(collector.http_port) as refused:
        answer = read_until_closed(refused)
    assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in answer
    held.pop().close()
    assert wait_until(lambda: len(connections.open) == 2)
    with connect(collector.http_port) as s:
        s.sendall(request_bytes(good_request("after one left").SerializeToString(), keep_alive=False))
        assert read_until_closed(s).startswith(b"HTTP/1.1 200 ")
    assert connections.refused == 1
    for s in held:
        s.close()


def _silent_calls(channel: grpc.Channel, count: int, release: threading.Event):
    export = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)

    def never_sent():
        release.wait(20)
        yield from ()

    return [export.future(never_sent(), timeout=15) for _ in range(count)]


def test_grpc_streams_that_never_send_their_message_end_at_read_timeout(sink, start_collector):
    collector = start_collector(limited(sink, grpc_settings="read_timeout: 500ms"))
    release = threading.Event()
    began = time.monotonic()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            calls = _silent_calls(channel, 20, release)
            codes = [call.exception(10).code() for call in calls]
            details = calls[0].exception().details()
    finally:
        release.set()
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED] * 20
    assert details == "no message arrived within read_timeout (0.5s) of the stream opening"
    assert time.monotonic() - began < 5.0


def test_grpc_streams_past_max_concurrent_streams_wait_for_a_free_one(sink, start_collector):
    collector = start_collector(limited(sink, grpc_settings="max_concurrent_streams: 2, read_timeout: 10s"))
    release = threading.Event()
    payload = good_request("third stream").SerializeToString()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
            # One call answered first (an empty request): the connection has exchanged its
            # HTTP/2 settings, so the client knows the limit before it opens more streams;
            # streams opened before that are not held to it.
            export(b"", timeout=5)
            silent = _silent_calls(channel, 2, release)
            with pytest.raises(grpc.RpcError) as error:
                export(payload, timeout=1)  # the connection's two streams are taken
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            grpc_export(collector.grpc_port, payload)  # another connection has streams to spare
            release.set()  # the silent calls end (no message): their streams free up
            assert all(call.exception(5).code() == grpc.StatusCode.INVALID_ARGUMENT for call in silent)
            export(payload, timeout=5)
    finally:
        release.set()
    assert wait_until(lambda: len(sink.spans()) == 2)


def test_grpc_connections_past_max_connections_are_refused(sink, start_collector):
    collector = start_collector(limited(sink, grpc_settings="max_connections: 2, read_timeout: 10s"))
    release = threading.Event()
    channels = [
        grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}", options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(3)
    ]
    try:
        held = [_silent_calls(channel, 1, release) for channel in channels[:2]]
        for channel in channels[:2]:
            grpc.channel_ready_future(channel).result(5)
        export = channels[2].unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as error:
            export(good_request("a third connection").SerializeToString(), timeout=2)
        assert error.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        assert not any(call.done() for calls in held for call in calls)
    finally:
        release.set()
        for channel in channels:
            channel.close()
    assert collector.pipeline.counts.received_spans == 0


def test_an_idle_grpc_connection_is_closed_after_max_connection_idle(sink, start_collector):
    collector = start_collector(
        limited(sink, grpc_settings="keepalive: {server_parameters: {max_connection_idle: 500ms}}")
    )
    states = []
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        channel.subscribe(states.append)
        export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        export(good_request("then idle").SerializeToString(), timeout=5)
        # The server's GOAWAY sends the channel back to IDLE; it reconnects when next used.
        assert wait_until(
            lambda: grpc.ChannelConnectivity.READY in states and states[-1] == grpc.ChannelConnectivity.IDLE,
            timeout_s=5,
        )
        export(good_request("reconnected").SerializeToString(), timeout=5)
        channel.unsubscribe(states.append)
    assert wait_until(lambda: len(sink.spans()) == 2)


@pytest.mark.parametrize(("min_time", "ended_by"), [("5m", "UNAVAILABLE"), ("10ms", "DEADLINE_EXCEEDED")])
def test_a_client_pinging_more_often_than_min_time_is_sent_away(sink, start_collector, min_time, ended_by):
    collector = start_collector(
        limited(sink, grpc_settings=f"read_timeout: 6s, keepalive: {{enforcement_policy: {{min_time: {min_time}}}}}")
    )
    release = threading.Event()
    pinging = [
        ("grpc.keepalive_time_ms", 100),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    began = time.monotonic()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}", options=pinging) as channel:
            (call,) = _silent_calls(channel, 1, release)
            error = call.exception(10)
    finally:
        release.set()
    # The client pings at most once a second. Too often for min_time: the third ping is
    # its second strike and the server sends it away (GOAWAY too_many_pings), before
    # read_timeout; allowed pings: the stream lives until read_timeout ends it.
    assert error.code().name == ended_by
    if ended_by == "UNAVAILABLE":
        assert "ping" in error.details().lower() and time.monotonic() - began < 5.5
