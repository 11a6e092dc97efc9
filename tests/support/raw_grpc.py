"""A gRPC call written frame by frame over plaintext HTTP/2, to send what grpc's own client
refuses to: metadata values that are not UTF-8."""

from __future__ import annotations

import socket
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def call(port: int, path: str, metadata: list[tuple[bytes, bytes]], message: bytes, timeout_s: float = 10) -> bytes:
    """Sends one unary call on stream 1 and returns the header blocks the server answered
    with (HPACK-encoded, undecoded) once it ended the stream."""
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", f"127.0.0.1:{port}".encode()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *metadata,
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as connection:
        connection.sendall(
            PREFACE
            + _frame(SETTINGS, 0, 0, b"")
            + _frame(HEADERS, END_HEADERS, 1, b"".join(_literal(name, value) for name, value in headers))
            + _frame(DATA, END_STREAM, 1, b"\0" + struct.pack(">I", len(message)) + message)
        )
        reader = connection.makefile("rb")
        blocks = []
        while True:
            head = reader.read(9)
            if len(head) < 9:
                raise ConnectionError("the server closed the connection before ending the call")
            length, kind, flags, stream = int.from_bytes(head[:3], "big"), head[3], head[4], head[5:9]
            payload = reader.read(length)
            stream_id = int.from_bytes(stream, "big") & 0x7FFFFFFF
            if kind == SETTINGS and not flags & ACK:
                connection.sendall(_frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                connection.sendall(_frame(PING, ACK, 0, payload))
            elif kind == HEADERS and stream_id == 1:
                blocks.append(payload)
                if flags & END_STREAM:
                    return b"".join(blocks)
            elif kind in (RST_STREAM, GOAWAY) or (kind == DATA and stream_id == 1 and flags & END_STREAM):
                return b"".join(blocks)


def _frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding."""
    return b"\0" + _length(name) + name + _length(value) + value


def _length(text: bytes) -> bytes:
    """An HPACK string length: a 7-bit prefix integer (RFC 7541, 5.1)."""
    n = len(text)
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes([*out, n])
