"""Clients' errors, by the hundred, are a few short lines in the log: the first of each
class with who sent it, then a count per interval; never a traceback, never a credential.
Real clients on loopback: raw sockets for what an HTTP client would not send, grpc, and
HTTP/2 written by hand for metadata grpc's client refuses to send; the health check's
HTTP server too."""

from __future__ import annotations

import logging
import re
import socket
import time

import grpc
import pytest

from tests.support import raw_grpc
from tests.support.bearer_token import TOKEN, WRONG, auth_config
from tests.support.otlp_client import EXPORT
from tests.support.running import wait_until
from tests.support.spans import good_request

N = 300
INTERVAL_S = 0.5  # the receivers' interval, shortened so that the counts show within the test


def http_request(port: int, head: bytes, body: bytes = b"", read: bool = True, method: bytes = b"POST") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(method + b" /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n" + body)
        return b"".join(iter(lambda: client.recv(4096), b"")) if read else b""


def aborted_bodies(collector) -> None:
    head = b"Content-Type: application/x-protobuf\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n"
    for _ in range(N):
        http_request(collector.http_port, head % TOKEN.encode(), b"\0" * 100, read=False)


def wrong_tokens_over_http(collector) -> None:
    head = b"Content-Type: application/x-protobuf\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n"
    head += b"Connection: close\r\n"
    for _ in range(N):
        assert http_request(collector.http_port, head % WRONG.encode()).startswith(b"HTTP/1.1 401")


def unparsable_requests(collector) -> None:
    for _ in range(N):
        reply = http_request(collector.http_port, b"Bad Header: x\r\nContent-Length: 0\r\nConnection: close\r\n")
        assert reply.startswith(b"HTTP/1.0 400") or reply.startswith(b"HTTP/1.1 400")


def unparsable_health_checks(collector) -> None:
    health_check = next(e for e in collector.service.extensions if e.id == "health_check")
    for _ in range(N):
        reply = http_request(health_check.port, b"Bad Header: x\r\nConnection: close\r\n", method=b"GET")
        assert reply.startswith(b"HTTP/1.0 400") or reply.startswith(b"HTTP/1.1 400")


def wrong_tokens_over_grpc(collector) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        export = channel.unary_unary(EXPORT)
        for _ in range(N):
            with pytest.raises(grpc.RpcError) as error:
                export(b"", metadata=(("authorization", f"Bearer {WRONG}"),), timeout=5)
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def tokens_not_utf8_over_grpc(collector) -> None:
    presented = b"Bearer \xff\xfe" + TOKEN.encode()
    for _ in range(N):
        raw_grpc.call(
            collector.grpc_port, EXPORT, [(b"authorization", presented)], good_request("x").SerializeToString()
        )


CLIENTS = {
    "aborted bodies": (aborted_bodies, "OTLP/HTTP body cut short"),
    "wrong tokens over HTTP": (wrong_tokens_over_http, "OTLP/HTTP 401 missing or invalid credentials"),
    "unparsable HTTP requests": (unparsable_requests, "OTLP/HTTP 400 unparsable request"),
    "unparsable health checks": (unparsable_health_checks, "health_check 400 unparsable request"),
    "wrong tokens over gRPC": (wrong_tokens_over_grpc, "OTLP/gRPC UNAUTHENTICATED missing or invalid credentials"),
    "tokens not UTF-8 over gRPC": (
        tokens_not_utf8_over_grpc,
        "OTLP/gRPC UNAUTHENTICATED missing or invalid credentials",
    ),
}


def counted(lines: list[str]) -> int:
    """How many errors the lines account for: the first, then each count."""
    return sum(int(m.group(1)) if (m := re.search(r": (\d+) more in the last ", line)) else 1 for line in lines)


@pytest.mark.parametrize("client", CLIENTS.values(), ids=CLIENTS.keys())
def test_hundreds_of_client_errors_are_a_few_short_lines(client, sink, start_collector, caplog):
    send, error = client
    caplog.set_level(logging.INFO)
    config = auth_config(sink, f"bearertokenauth: {{token: '{TOKEN}'}}\n  health_check: {{endpoint: 127.0.0.1:0}}")
    collector = start_collector(
        config.replace("extensions: [bearertokenauth]", "extensions: [bearertokenauth, health_check]")
    )
    receiver = collector.service.receivers[0]
    for log in (
        receiver.http.client_errors,
        receiver.grpc.client_errors,
        collector.service.extensions[1].client_errors,
    ):
        log.interval_s = INTERVAL_S
    caplog.clear()
    started = time.monotonic()
    send(collector)

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith(error)]

    assert wait_until(lambda: counted(lines()) == N, timeout_s=15), lines()
    intervals = (time.monotonic() - started) / INTERVAL_S
    assert len(lines()) <= intervals + 2  # the first, then at most one a interval
    assert lines()[0].startswith(f"{error}: from ") and "(a client error; more in the next 500ms" in lines()[0]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert len(caplog.text) < 300 * len(caplog.records)
    assert TOKEN not in caplog.text and WRONG not in caplog.text
    assert collector.pipeline.counts.received_spans == 0
