"""OTLP/HTTP receiver: `POST /v1/traces` with protobuf or JSON, optionally gzip.

Status codes follow the OTLP specification: 400 for data that cannot be decoded, 415
for another content type, 413 when the body exceeds the limit after decompression (a
gzip bomb stops at the limit, it is never inflated in full), 503 with `Retry-After` when
the pipeline is full, 401 with `WWW-Authenticate` when an authenticator is configured
and the headers do not satisfy it (decided first, before the body is read). Responses,
errors included, use the request's content type.
"""

from __future__ import annotations

import logging
import zlib

from aiohttp import web
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.auth import ServerAuthenticator
from spanscore.core.consumer import ConsumerFull, TracesConsumer
from spanscore.core.otlp_json import OtlpJsonError, decode_request, encode_message
from spanscore.receivers.ingest import InvalidRequest, ingest
from spanscore.receivers.tls import TlsServerConfig, security

log = logging.getLogger("spanscore.receivers.http")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_CONTENT_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
_READ_CHUNK = 1 << 16


class _TooLarge(Exception):
    pass


class HttpReceiver:
    def __init__(
        self,
        host: str,
        port: int,
        path: str,
        max_body_bytes: int,
        consumer: TracesConsumer,
        tls: TlsServerConfig | None = None,
        authenticator: ServerAuthenticator | None = None,
    ):
        self.host = host
        self.port = port
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.consumer = consumer
        self.tls = tls
        self.authenticator = authenticator
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        ssl_context = self.tls.ssl_context() if self.tls is not None else None
        # The body is streamed and inflated by hand against the limit (see _read_body),
        # so aiohttp's own decompression is turned off.
        app = web.Application()
        app.router.add_post(self.path, self._export)
        runner = web.AppRunner(app, auto_decompress=False, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host or None, self.port, reuse_address=True, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                f"OTLP/HTTP receiver cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._runner = runner
        self.port = site._server.sockets[0].getsockname()[1]  # the real port when 0 was asked for
        log.info(
            "OTLP/HTTP receiver listening on %s://%s:%d%s (%s)",
            "http" if self.tls is None else "https",
            self.host or "0.0.0.0",
            self.port,
            self.path,
            security(self.tls),
        )

    async def stop(self, grace_s: float) -> None:
        """Stop listening; a request in flight gets `grace_s` to finish, then it is cancelled."""
        runner, self._runner = self._runner, None
        if runner is not None:
            # aiohttp waits this long for a request in flight, then as long again once it
            # cancelled it; set when the runner is made (60 s by default), and 0 is no limit.
            runner._shutdown_timeout = max(grace_s / 2, 0.001)
            await runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        content_type = _CONTENT_TYPES.get(request.content_type)
        authenticator = self.authenticator
        if authenticator is not None and not authenticator.authenticate(request.headers):
            return _error(
                content_type or JSON,
                401,
                code_pb2.UNAUTHENTICATED,
                "missing or invalid credentials",
                headers={"WWW-Authenticate": authenticator.challenge()},
            )
        if content_type is None:
            return web.Response(
                status=415,
                text=f"unsupported content type {request.content_type!r}; send {PROTOBUF} or {JSON}\n",
            )
        try:
            self.consumer.check_capacity()  # refuse before reading and parsing the body
        except ConsumerFull as exc:
            return _error(
                content_type, 503, code_pb2.UNAVAILABLE, str(exc), headers={"Retry-After": str(exc.retry_after_s)}
            )
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate", ""):
            return _error(
                content_type, 415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Encoding {encoding!r}; use gzip"
            )
        try:
            body = await self._read_body(request, encoding)
        except _TooLarge:
            return _error(
                content_type,
                413,
                code_pb2.RESOURCE_EXHAUSTED,
                f"request body exceeds the limit of {self.max_body_bytes} bytes (after decompression)",
            )
        except zlib.error as exc:
            return _error(content_type, 400, code_pb2.INVALID_ARGUMENT, f"body is not valid {encoding}: {exc}")
        try:
            if content_type == PROTOBUF:
                export_request = ExportTraceServiceRequest.FromString(body)
            else:
                export_request = decode_request(body)
        except DecodeError as exc:
            return _error(content_type, 400, code_pb2.INVALID_ARGUMENT, f"malformed ExportTraceServiceRequest: {exc}")
        except OtlpJsonError as exc:
            return _error(content_type, 400, code_pb2.INVALID_ARGUMENT, str(exc))
        try:
            response = await ingest(self.consumer, export_request, body if content_type == PROTOBUF else None)
        except InvalidRequest as exc:
            return _error(content_type, 400, code_pb2.INVALID_ARGUMENT, str(exc))
        except ConsumerFull as exc:
            return _error(
                content_type, 503, code_pb2.UNAVAILABLE, str(exc), headers={"Retry-After": str(exc.retry_after_s)}
            )
        return _encode(content_type, 200, response)

    async def _read_body(self, request: web.Request, encoding: str) -> bytes:
        limit = self.max_body_bytes
        inflater = _Inflater(encoding) if encoding in ("gzip", "deflate") else None
        if request.content_length is not None and inflater is None and request.content_length > limit:
            raise _TooLarge
        parts: list[bytes] = []
        size = 0
        raw_size = 0
        while True:
            chunk = await request.content.read(_READ_CHUNK)
            if not chunk:
                break
            raw_size += len(chunk)
            if raw_size > limit:
                raise _TooLarge
            if inflater is not None:
                chunk = inflater.decompress(chunk, limit - size + 1)
            size += len(chunk)
            if size > limit:
                raise _TooLarge
            parts.append(chunk)
        if inflater is not None:
            tail = inflater.finish()
            size += len(tail)
            if size > limit:
                raise _TooLarge
            parts.append(tail)
        return b"".join(parts)


class _Inflater:
    """Inflates a body chunk by chunk; a gzip body may hold several members (RFC 1952),
    read one after the other, and anything after the end of a stream is an error."""

    def __init__(self, encoding: str):
        self._gzip = encoding == "gzip"
        self._stream = self._new()

    def _new(self):
        return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS) if self._gzip else zlib.decompressobj()

    def decompress(self, data: bytes, max_length: int) -> bytes:
        """Up to `max_length` bytes from `data`; raises _TooLarge past it, zlib.error when damaged."""
        out: list[bytes] = []
        while data:
            if self._stream.eof:
                if not self._gzip:
                    raise zlib.error("data after the end of the compressed stream")
                self._stream = self._new()  # the next gzip member
            if max_length <= 0:  # zlib reads 0 as "no limit"
                raise _TooLarge
            # max_length caps what the compressed bytes may expand to.
            piece = self._stream.decompress(data, max_length)
            if self._stream.unconsumed_tail:
                raise _TooLarge
            max_length -= len(piece)
            out.append(piece)
            data = self._stream.unused_data
        return b"".join(out)

    def finish(self) -> bytes:
        tail = self._stream.flush()
        if not self._stream.eof:
            raise zlib.error("truncated compressed stream")
        return tail


def _encode(content_type: str, status: int, message, headers: dict[str, str] | None = None) -> web.Response:
    if content_type == PROTOBUF:
        return web.Response(status=status, body=message.SerializeToString(), content_type=PROTOBUF, headers=headers)
    return web.Response(status=status, text=encode_message(message), content_type=JSON, headers=headers)


def _error(
    content_type: str, status: int, code: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    if status >= 500:
        log.warning("OTLP/HTTP %d: %s", status, message)
    else:
        log.info("OTLP/HTTP rejected a request (%d): %s", status, message)
    return _encode(content_type, status, status_pb2.Status(code=code, message=message), headers)
