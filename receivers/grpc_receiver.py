"""OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export`.

Requests arrive as raw bytes and are parsed here, so malformed protobuf is answered
with INVALID_ARGUMENT and a message rather than grpc's generic deserialization error.
gRPC itself enforces the size limit (after decompression) with RESOURCE_EXHAUSTED.

The method is unary on the wire but served as stream-unary, so the handler runs before
the message is received: a client without valid credentials (UNAUTHENTICATED) or
arriving while the pipeline is full (UNAVAILABLE) is answered without its message being
read, let alone parsed.

Refused calls are clients' errors: each class is logged as one short line, then counted
(`core.client_errors`). grpc reads a metadata value that is not UTF-8 as Latin-1 and logs
an ERROR traceback quoting it each time, a credential perhaps: that log is dropped; such
a credential is refused (and logged) like any wrong one.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import NoReturn

import grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from multidict import CIMultiDict

from spanscore.core.auth import ServerAuthenticator, refusal
from spanscore.core.client_errors import ClientErrorLog
from spanscore.core.consumer import ConsumerFull, TooCostly, TracesConsumer
from spanscore.core.otlp_protobuf import MalformedProtobuf, decode_request
from spanscore.receivers.ingest import PROTOBUF_DECODING_FACTOR, InvalidRequest, ingest
from spanscore.receivers.limits import GrpcLimits
from spanscore.receivers.tls import TlsServerConfig, security

log = logging.getLogger("spanscore.receivers.grpc")

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
# grpc's logger and message for a metadata value it cannot decode as UTF-8.
_GRPC_LOGGER = "grpc._cython.cygrpc"
_UNDECODABLE = "Invalid encoding on %s"


class GrpcReceiver:
    def __init__(
        self,
        endpoint: str,
        max_message_bytes: int,
        consumer: TracesConsumer,
        tls: TlsServerConfig | None = None,
        authenticator: ServerAuthenticator | None = None,
        limits: GrpcLimits | None = None,
    ):
        self.endpoint = endpoint
        self.max_message_bytes = max_message_bytes
        self.consumer = consumer
        self.tls = tls
        self.authenticator = authenticator
        self.limits = limits or GrpcLimits()
        self.port: int | None = None
        self.client_errors = ClientErrorLog(log)
        self._undecodable = _UndecodableMetadata()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.so_reuseport", 0),
                *self.limits.channel_options(),
            ]
        )
        handler = grpc.stream_unary_rpc_method_handler(
            self._export, request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        credentials = self.tls.grpc_credentials() if self.tls is not None else None
        try:
            if credentials is None:
                self.port = server.add_insecure_port(self.endpoint)
            else:
                self.port = server.add_secure_port(self.endpoint, credentials)
        except RuntimeError as exc:
            raise OSError(f"OTLP/gRPC receiver cannot listen on {self.endpoint}: {exc}") from None
        await server.start()
        self._server = server
        logging.getLogger(_GRPC_LOGGER).addFilter(self._undecodable)
        log.info(
            "OTLP/gRPC receiver listening on %s (%s)",
            self.endpoint.rsplit(":", 1)[0] + f":{self.port}",
            security(self.tls),
        )

    async def stop(self, grace_s: float) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)
            logging.getLogger(_GRPC_LOGGER).removeFilter(self._undecodable)
        self.client_errors.flush()

    async def _export(self, _messages, context: grpc.aio.ServicerContext) -> bytes:
        authenticator = self.authenticator
        if authenticator is not None:
            # Binary (`-bin`) metadata is no header an authenticator reads.
            headers = CIMultiDict((k, v) for k, v in context.invocation_metadata() or () if isinstance(v, str))
            problem = refusal(authenticator, headers)
            if problem is not None:
                await self._refuse(context, grpc.StatusCode.UNAUTHENTICATED, problem, problem)
        try:
            self.consumer.check_capacity()  # refuse before paying for the receive and the parse
        except ConsumerFull as exc:
            await self._full(context, exc)
        try:
            body = await asyncio.wait_for(context.read(), self.limits.read_timeout)
        except asyncio.TimeoutError:
            message = f"no message arrived within read_timeout ({self.limits.read_timeout:g}s) of the stream opening"
            await self._refuse(context, grpc.StatusCode.DEADLINE_EXCEEDED, message, "message too slow")
        if body is grpc.aio.EOF:  # pyright: ignore[reportAttributeAccessIssue]  # missing from typeshed's grpc stubs
            message = "no ExportTraceServiceRequest was sent"
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, message, "no request")
        try:
            reservation = self.consumer.reserve(len(body) * PROTOBUF_DECODING_FACTOR)
        except ConsumerFull as exc:
            await self._full(context, exc)
        except TooCostly as exc:
            await self._refuse(context, grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), "too costly to decode")
        try:
            return await self._decode_and_ingest(body, context)
        finally:
            reservation.release()

    async def _decode_and_ingest(self, body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = decode_request(body)
        except MalformedProtobuf as exc:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc), "malformed request")
        try:
            response = await ingest(self.consumer, request, body)
        except InvalidRequest as exc:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc), "every span invalid")
        except ConsumerFull as exc:
            await self._full(context, exc)
        return response.SerializeToString()

    async def _refuse(
        self, context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, error: str
    ) -> NoReturn:
        """Ends the call with a client's error of class `error`, which is logged (a line per
        class and interval) with the client's address and the message it is told."""
        self.client_errors.record(f"OTLP/gRPC {code.name} {error}", f"from {context.peer()}: {message}")
        await context.abort(code, message)

    async def _full(self, context: grpc.aio.ServicerContext, exc: ConsumerFull) -> NoReturn:
        """UNAVAILABLE with a retry delay. Not the client's error, but a line per call would
        flood the log exactly while the collector is overloaded."""
        self.client_errors.record(
            "OTLP/gRPC UNAVAILABLE pipeline full", f"from {context.peer()}: {exc}", logging.WARNING
        )
        await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc), trailing_metadata=_retry_info(exc.retry_after_s))


class _UndecodableMetadata(logging.Filter):
    """Drops grpc's log of a metadata value that is not UTF-8, which quotes the value."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _UNDECODABLE


@functools.lru_cache(maxsize=16)  # a few delays, sent on every refusal while overloaded
def _retry_info(retry_after_s: int) -> tuple[tuple[str, bytes], ...]:
    """RetryInfo, the OTLP way to say when to come back.

    Sent twice: in the standard `grpc-status-details-bin` status details (read by the Go
    Collector and grpc-status clients) and as `google.rpc.retryinfo-bin` (read by the
    opentelemetry-python exporter).
    """
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=retry_after_s))
    status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message="pipeline full")
    status.details.add().Pack(info)
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", info.SerializeToString()),
    )
