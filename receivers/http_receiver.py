"""OTLP/HTTP receiver: `POST /v1/traces` with protobuf or JSON, optionally gzip.

Status codes follow the OTLP specification: 400 for data that cannot be decoded, 415
for another content type, 413 when the body exceeds the limit after decompression (a
gzip bomb stops at the limit, it is never inflated in full), 503 with `Retry-After` when
the pipeline is full, 401 with `WWW-Authenticate` when an authenticator is configured
and the headers do not satisfy it (decided first, before the body is read), 408 when the
body does not arrive within `read_timeout`. Responses, errors included, use the
request's content type. How long and how many connections are kept is
`http_connections`' part.

Refused requests, a client leaving mid-body and requests aiohttp cannot parse are
clients' errors: each class is logged as one short line, then counted
(`core.client_errors`); a traceback means a fault of the collector's own.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
import zlib
from collections.abc import Awaitable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from google.rpc import code_pb2, status_pb2

from spanscore.core.auth import ServerAuthenticator, refusal
from spanscore.core.client_errors import ClientErrorLog, ServerLog
from spanscore.core.consumer import ConsumerFull, Reservation, TooCostly, TracesConsumer
from spanscore.core.otlp_json import OtlpJsonError, encode_message
from spanscore.core.otlp_json import decode_request as decode_json
from spanscore.core.otlp_protobuf import MalformedProtobuf
from spanscore.core.otlp_protobuf import decode_request as decode_protobuf
from spanscore.core.quoting import excerpt
from spanscore.receivers.http_connections import Connections, LimitedSite, body_deadline
from spanscore.receivers.ingest import JSON_DECODING_FACTOR, PROTOBUF_DECODING_FACTOR, InvalidRequest, ingest
from spanscore.receivers.limits import HttpLimits
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
        limits: HttpLimits | None = None,
    ):
        self.host = host
        self.port = port
        self.path = path
        self.max_body_bytes = max_body_bytes
        self.consumer = consumer
        self.tls = tls
        self.authenticator = authenticator
        self.client_errors = ClientErrorLog(log)
        self.connections = Connections(limits or HttpLimits())
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        ssl_context = self.tls.ssl_context() if self.tls is not None else None
        # The body is streamed and inflated by hand against the limit (see _read_body),
        # so aiohttp's own decompression is turned off.
        app = web.Application(middlewares=[self.connections.middleware])
        app.router.add_post(self.path, self._export)
        server_log = ServerLog(
            logging.getLogger("aiohttp.server"), self.client_errors, "OTLP/HTTP 400 unparsable request", _unparsable
        )
        runner = web.AppRunner(app, auto_decompress=False, access_log=None, handle_signals=False, logger=server_log)
        await runner.setup()
        site = LimitedSite(runner, self.connections, self.host or None, self.port, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                f"OTLP/HTTP receiver cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self._runner = runner
        self.port = site.port
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
        self.client_errors.flush()

    async def _export(self, request: web.Request) -> web.Response:
        content_type = _CONTENT_TYPES.get(request.content_type)
        authenticator = self.authenticator
        if authenticator is not None and (problem := refusal(authenticator, request.headers)) is not None:
            return self._refuse(
                request,
                content_type or JSON,
                401,
                code_pb2.UNAUTHENTICATED,
                problem,
                problem,
                headers={"WWW-Authenticate": authenticator.challenge()},
            )
        if content_type is None:
            message = f"unsupported content type '{excerpt(request.content_type)}'; send {PROTOBUF} or {JSON}"
            self.client_errors.record("OTLP/HTTP 415 unsupported content type", f"from {request.remote}: {message}")
            return web.Response(status=415, text=message + "\n")
        try:
            self.consumer.check_capacity()  # refuse before reading and parsing the body
        except ConsumerFull as exc:
            return self._full(request, content_type, exc)
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate", ""):
            message = f"unsupported Content-Encoding '{excerpt(encoding)}'; use gzip"
            return self._refuse(
                request, content_type, 415, code_pb2.INVALID_ARGUMENT, message, "unsupported Content-Encoding"
            )
        reservation = self.consumer.reserve(0)  # grown as the body's size becomes known
        try:
            return await self._receive(request, content_type, encoding, reservation)
        finally:
            reservation.release()

    async def _receive(
        self, request: web.Request, content_type: str, encoding: str, reservation: Reservation
    ) -> web.Response:
        try:
            remaining = body_deadline(request) - asyncio.get_running_loop().time()
            body = await _forgetting_on_error(
                asyncio.wait_for(self._read_body(request, encoding, reservation), max(0.0, remaining))
            )
        except asyncio.TimeoutError:
            message = f"the request body did not arrive within read_timeout ({self.connections.limits.read_timeout:g}s)"
            self.client_errors.record("OTLP/HTTP 408 body too slow", f"from {request.remote}: {message}")
            response = _error(content_type, 408, code_pb2.DEADLINE_EXCEEDED, message)
            # Sent and closed here: aiohttp would otherwise linger on the body that never came.
            response.force_close()
            await response.prepare(request)
            await response.write_eof()
            if request.transport is not None:
                request.transport.close()
            return response
        except _TooLarge:
            message = f"request body exceeds the limit of {self.max_body_bytes} bytes (after decompression)"
            return self._refuse(request, content_type, 413, code_pb2.RESOURCE_EXHAUSTED, message, "body too large")
        except zlib.error as exc:
            message = f"body is not valid {encoding}: {exc}"
            return self._refuse(request, content_type, 400, code_pb2.INVALID_ARGUMENT, message, "damaged compression")
        except (ConnectionResetError, HttpProcessingError) as exc:
            # The client left, or broke the body's framing: no one reads an answer.
            self.client_errors.record("OTLP/HTTP body cut short", f"from {request.remote}: {exc!r}")
            return web.Response(status=400)
        except ConsumerFull as exc:  # the memory its decoding takes does not fit now
            return self._full(request, content_type, exc)
        except TooCostly as exc:
            return self._refuse(
                request, content_type, 413, code_pb2.RESOURCE_EXHAUSTED, str(exc), "too costly to decode"
            )
        try:
            export_request = decode_protobuf(body) if content_type == PROTOBUF else decode_json(body)
        except (MalformedProtobuf, OtlpJsonError) as exc:
            return self._refuse(request, content_type, 400, code_pb2.INVALID_ARGUMENT, str(exc), "malformed request")
        try:
            response = await ingest(self.consumer, export_request, body if content_type == PROTOBUF else None)
        except InvalidRequest as exc:
            return self._refuse(request, content_type, 400, code_pb2.INVALID_ARGUMENT, str(exc), "every span invalid")
        except ConsumerFull as exc:
            return self._full(request, content_type, exc)
        return _encode(content_type, 200, response)

    def _refuse(
        self,
        request: web.Request,
        content_type: str,
        status: int,
        code: int,
        message: str,
        error: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        """The answer to a client's error of class `error`, which is logged (a line per
        class and interval) with the client's address and the message it is told."""
        self.client_errors.record(f"OTLP/HTTP {status} {error}", f"from {request.remote}: {message}")
        return _error(content_type, status, code, message, headers)

    def _full(self, request: web.Request, content_type: str, exc: ConsumerFull) -> web.Response:
        """503 with `Retry-After`. Not the client's error, but a line per request would
        flood the log exactly while the collector is overloaded."""
        self.client_errors.record("OTLP/HTTP 503 pipeline full", f"from {request.remote}: {exc}", logging.WARNING)
        headers = {"Retry-After": str(exc.retry_after_s)}
        return _error(content_type, 503, code_pb2.UNAVAILABLE, str(exc), headers)

    async def _read_body(self, request: web.Request, encoding: str, reservation: Reservation) -> bytes:
        """The body, inflated, within the size limit; `reservation` counts what reading and
        decoding it will take, before it is read when its length is known."""
        limit = self.max_body_bytes
        factor = JSON_DECODING_FACTOR if request.content_type == JSON else PROTOBUF_DECODING_FACTOR
        inflater = _Inflater(encoding) if encoding in ("gzip", "deflate") else None
        counted = 0
        if request.content_length is not None and inflater is None:
            if request.content_length > limit:
                raise _TooLarge
            reservation.grow(request.content_length * factor)
            counted = request.content_length
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
            if size > counted:
                reservation.grow((size - counted) * factor)
                counted = size
            parts.append(chunk)
        if inflater is not None:
            tail = inflater.finish()
            size += len(tail)
            if size > limit:
                raise _TooLarge
            reservation.grow(max(0, size - counted) * factor)
            parts.append(tail)
        return b"".join(parts)


async def _forgetting_on_error(reading: Awaitable[bytes]) -> bytes:
    """What `reading` returns; when it raises, what it had read is freed before the error
    is handled. The chunks read so far live in the locals of the frames the exception
    passed through, and wait_for's frame holds the task that holds the exception: a cycle
    that only the cyclic garbage collector frees, which under the collector's thresholds
    (pipeline/gc_tuning.py) may not run for a long time. A refused gzip bomb would keep
    up to the body limit each until then."""
    try:
        return await reading
    except BaseException as exc:
        error: BaseException | None = exc
        while error is not None:  # the error, and what it was raised from (a timeout: the cancellation)
            traceback.clear_frames(error.__traceback__)  # frames that have returned; the running one is kept
            error = error.__cause__ or error.__context__
        raise


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
    return _encode(content_type, status, status_pb2.Status(code=code, message=message), headers)


def _unparsable(exc: BaseException) -> str | None:
    """What aiohttp found wrong in a request it could not parse (a bad header, a broken
    chunk), on one line."""
    if isinstance(exc, HttpProcessingError) and exc.code < 500:
        return " ".join(exc.message.split())
    return None
