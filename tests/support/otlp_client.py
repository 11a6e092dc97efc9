"""Raw OTLP calls to a collector on loopback: gRPC Export with a request or its bytes, and
an HTTP POST that returns the status, headers and body whatever the status."""

from __future__ import annotations

import urllib.error
import urllib.request
import zlib

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def post(port: int, body: bytes, content_type: str, encoding: str | None = None, path: str = "/v1/traces"):
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def grpc_export(port: int, payload: bytes, compression=None):
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 512 * 2**20)]) as channel:
        export = channel.unary_unary(
            EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        return export(payload, timeout=10, compression=compression)


def send(port: int, request) -> ExportTraceServiceResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        return export(request.SerializeToString(), timeout=5)


def gzip_bomb(inflated_mib: int) -> bytes:
    """A gzip body of `inflated_mib` MiB of zeros: about a thousandth of that on the wire,
    made a MiB at a time (the inflated body is never held)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(2**20)
    return b"".join([*(deflate.compress(zeros) for _ in range(inflated_mib)), deflate.flush()])
