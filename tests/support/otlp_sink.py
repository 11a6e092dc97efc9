"""A fake OTLP backend for tests: gRPC and HTTP servers on loopback that keep every
request they accept and can be told to fail the next requests (status, Retry-After)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc
from aiohttp import web
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.otlp_json import decode_request

# Requests still held when the server stops (a slow answer) are cut off after this.
STOP_GRACE_S = 1.0


@dataclass
class Fault:
    grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    http_status: int = 503
    retry_after_s: float | None = None


@dataclass
class OtlpSink:
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)  # consumed one per request
    down_until: float = 0.0  # time.monotonic() before which gRPC exports answer UNAVAILABLE: an outage
    attempts: int = 0
    grpc_port: int = 0
    http_port: int = 0
    arrived: asyncio.Event | None = None
    headers: list[dict[str, str]] = field(default_factory=list)  # per accepted request, lowercased keys
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    logs: list[tuple[str, ExportLogsServiceRequest]] = field(default_factory=list)  # (transport, request)
    answer_after_s: float = 0.0  # HTTP exports are kept at once and answered this late: a slow backend
    answer: ExportTraceServiceResponse = field(default_factory=ExportTraceServiceResponse)  # to a kept export

    async def start(self, certificate: tuple[bytes, bytes] | None = None) -> OtlpSink:
        """Listen on loopback; with `certificate` (PEM key, PEM chain) both servers use TLS."""
        self.arrived = asyncio.Event()
        self._grpc = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export,
            request_deserializer=ExportTraceServiceRequest.FromString,
            response_serializer=ExportTraceServiceResponse.SerializeToString,
        )
        metrics_handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export_metrics,
            request_deserializer=ExportMetricsServiceRequest.FromString,
            response_serializer=ExportMetricsServiceResponse.SerializeToString,
        )
        logs_handler = grpc.unary_unary_rpc_method_handler(
            self._grpc_export_logs,
            request_deserializer=ExportLogsServiceRequest.FromString,
            response_serializer=ExportLogsServiceResponse.SerializeToString,
        )
        self._grpc.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.logs.v1.LogsService", {"Export": logs_handler}
                ),
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
                ),
                grpc.method_handlers_generic_handler(
                    "opentelemetry.proto.collector.metrics.v1.MetricsService", {"Export": metrics_handler}
                ),
            )
        )
        if certificate is None:
            self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        else:
            self.grpc_port = self._grpc.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([certificate]))
        await self._grpc.start()
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_post("/v1/traces", self._http_export)
        # Where the Langfuse SDK posts its OTLP traces, under its host.
        app.router.add_post("/api/public/otel/v1/traces", self._http_export)
        app.router.add_post("/v1/metrics", self._http_export_metrics)
        app.router.add_post("/v1/logs", self._http_export_logs)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=STOP_GRACE_S)
        await self._runner.setup()
        ssl_context = None
        if certificate is not None:
            ssl_context = _server_ssl_context(*certificate)
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        await self._grpc.stop(0)
        await self._runner.cleanup()

    def spans(self) -> list[Span]:
        return [s for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def _accept(self, request: ExportTraceServiceRequest) -> None:
        self.requests.append(request)
        self.arrived.set()

    async def _grpc_export(self, request: ExportTraceServiceRequest, context) -> ExportTraceServiceResponse:
        self.attempts += 1
        if time.monotonic() < self.down_until:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "backend down")
        if self.faults:
            fault = self.faults.pop(0)
            metadata = ()
            if fault.retry_after_s is not None:
                info = error_details_pb2.RetryInfo(
                    retry_delay=duration_pb2.Duration(
                        seconds=int(fault.retry_after_s), nanos=int((fault.retry_after_s % 1) * 1e9)
                    )
                )
                metadata = (("google.rpc.retryinfo-bin", info.SerializeToString()),)
            await context.abort(fault.grpc_code, "injected fault", trailing_metadata=metadata)
        self.headers.append({k.lower(): v for k, v in context.invocation_metadata()})
        self._accept(request)
        return self.answer

    async def _grpc_export_metrics(self, request: ExportMetricsServiceRequest, context) -> ExportMetricsServiceResponse:
        self.metrics.append(request)
        return ExportMetricsServiceResponse()

    async def _http_export_metrics(self, request: web.Request) -> web.Response:
        self.metrics.append(ExportMetricsServiceRequest.FromString(await request.read()))
        return web.Response(
            body=ExportMetricsServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def _grpc_export_logs(self, request: ExportLogsServiceRequest, context) -> ExportLogsServiceResponse:
        self.logs.append(("grpc", request))
        return ExportLogsServiceResponse()

    async def _http_export_logs(self, request: web.Request) -> web.Response:
        self.logs.append(("http", ExportLogsServiceRequest.FromString(await request.read())))
        return web.Response(body=ExportLogsServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    def log_records(self, transport: str | None = None) -> list:
        return [
            record
            for via, request in self.logs
            if transport in (None, via)
            for resource_logs in request.resource_logs
            for scope_logs in resource_logs.scope_logs
            for record in scope_logs.log_records
        ]

    def metric_points(self, name: str) -> list:
        """Every data point of metric `name` across the metric exports received."""
        return [
            point
            for request in self.metrics
            for rm in request.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in (metric.histogram.data_points or metric.sum.data_points)
        ]

    async def _http_export(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.faults:
            fault = self.faults.pop(0)
            headers = {"Retry-After": str(int(fault.retry_after_s))} if fault.retry_after_s is not None else None
            return web.Response(status=fault.http_status, text="injected fault", headers=headers)
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        body = await request.read()  # aiohttp inflates gzip bodies itself here
        if request.content_type == "application/json":
            self._accept(decode_request(body))
            await asyncio.sleep(self.answer_after_s)
            return web.json_response({})
        self._accept(ExportTraceServiceRequest.FromString(body))
        await asyncio.sleep(self.answer_after_s)
        return web.Response(body=self.answer.SerializeToString(), content_type="application/x-protobuf")


def _server_ssl_context(key_pem: bytes, chain_pem: bytes):
    import ssl
    import tempfile

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile() as key, tempfile.NamedTemporaryFile() as chain:
        key.write(key_pem)
        key.flush()
        chain.write(chain_pem)
        chain.flush()
        context.load_cert_chain(chain.name, key.name)
    return context
