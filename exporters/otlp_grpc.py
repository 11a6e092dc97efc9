"""`otlp` exporter: OTLP over gRPC to any OTLP backend (Jaeger, Tempo, a Collector, Phoenix)."""

from __future__ import annotations

import logging
from typing import Literal

import grpc
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from pydantic import Field, model_validator

from spanscore.core.auth import AuthSettings, client_headers
from spanscore.core.component import ComponentFactory, Host
from spanscore.core.export_request import serialized_request
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig, ExportError
from spanscore.exporters.otlp_response import warn_partial_success
from spanscore.exporters.tls import TlsClientConfig

log = logging.getLogger("spanscore.exporters.otlp")

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# The OTLP spec's retryable gRPC codes; RESOURCE_EXHAUSTED only when the server sent RetryInfo.
_RETRYABLE = {
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DATA_LOSS,
}
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class OtlpGrpcExporterConfig(ExporterConfig):
    endpoint: str = Field(min_length=1)
    tls: TlsClientConfig = Field(default_factory=TlsClientConfig)
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # credentials, often
    auth: AuthSettings | None = None  # its authenticator's headers are sent beside `headers`
    compression: Literal["gzip", "none"] = "gzip"

    @model_validator(mode="after")
    def _endpoint_shape(self) -> OtlpGrpcExporterConfig:
        target = self.endpoint.split("://", 1)[-1]
        if ":" not in target.rsplit("]", 1)[-1]:
            raise ValueError(f"endpoint {self.endpoint!r} needs a port, e.g. 127.0.0.1:4317")
        if self.tls.insecure_skip_verify:
            raise ValueError("tls.insecure_skip_verify is not supported by the gRPC exporter; set tls.ca_file")
        return self

    @property
    def target(self) -> str:
        return self.endpoint.split("://", 1)[-1].rstrip("/")

    @property
    def plaintext(self) -> bool:
        return self.endpoint.startswith("http://") or (self.tls.insecure and not self.endpoint.startswith("https://"))


class OtlpGrpcExporter(Exporter):
    stores_requests = True  # can keep its sending queue in a storage extension

    config: OtlpGrpcExporterConfig

    @property
    def sends_protobuf(self) -> bool:
        return True

    async def open(self) -> None:
        config = self.config
        options: list[tuple[str, int | str]] = [
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ]
        if config.tls.server_name_override:
            options.append(("grpc.ssl_target_name_override", config.tls.server_name_override))
        compression = grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression
        if config.plaintext:
            self._channel = grpc.aio.insecure_channel(config.target, options=options, compression=compression)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=config.tls.read("ca_file"),
                private_key=config.tls.read("key_file"),
                certificate_chain=config.tls.read("cert_file"),
            )
            self._channel = grpc.aio.secure_channel(
                config.target, credentials, options=options, compression=compression
            )
        self._export = self._channel.unary_unary(
            EXPORT_METHOD, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
        )
        self._metadata = tuple((k.lower(), v) for k, v in self.headers.items())

    async def send(self, traces: list[Trace]) -> None:
        await self.send_encoded(serialized_request(traces))

    async def send_encoded(self, request: bytes) -> None:
        try:
            response = await self._export(request, timeout=self.config.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            retry_after = _retry_delay(exc.trailing_metadata())
            retryable = code in _RETRYABLE or (code == grpc.StatusCode.RESOURCE_EXHAUSTED and retry_after is not None)
            raise ExportError(f"{self.config.target}: {code.name}: {exc.details()}", retryable, retry_after) from None
        warn_partial_success(log, self.id, response)

    async def close(self) -> None:
        channel = getattr(self, "_channel", None)
        if channel is not None:
            await channel.close()


def _retry_delay(trailing_metadata) -> float | None:
    """The server's RetryInfo, from status details or the bare `google.rpc.retryinfo-bin`."""
    info = None
    for key, value in trailing_metadata or ():
        if key == "google.rpc.retryinfo-bin":
            info = error_details_pb2.RetryInfo.FromString(value)
        elif key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                # googleapis-common-protos ships no stubs: the checker guesses DESCRIPTOR's type.
                if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):  # pyright: ignore[reportArgumentType]
                    info = error_details_pb2.RetryInfo()
                    detail.Unpack(info)
        if info is not None:
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


def metric_reader(component_id: str, config: OtlpGrpcExporterConfig, interval_s: float, host: Host):
    """The score metrics over OTLP/gRPC to the same endpoint, with the same TLS and headers."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    exporter = OTLPMetricExporter(**_sdk_exporter_settings(config, host))
    return PeriodicExportingMetricReader(exporter, export_interval_millis=interval_s * 1000)


def log_exporter(component_id: str, config: OtlpGrpcExporterConfig, host: Host):
    """The evaluation events over OTLP/gRPC to the same endpoint, with the same TLS and headers."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

    return OTLPLogExporter(**_sdk_exporter_settings(config, host))


def _sdk_exporter_settings(config: OtlpGrpcExporterConfig, host: Host) -> dict:
    credentials = None
    if not config.plaintext:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=config.tls.read("ca_file"),
            private_key=config.tls.read("key_file"),
            certificate_chain=config.tls.read("cert_file"),
        )
    return {
        "endpoint": config.target,
        "insecure": config.plaintext,
        "credentials": credentials,
        "headers": client_headers(config, host),
        "timeout": config.timeout,
        "compression": grpc.Compression.Gzip if config.compression == "gzip" else grpc.Compression.NoCompression,
    }


FACTORY = ComponentFactory("exporter", "otlp", OtlpGrpcExporterConfig, OtlpGrpcExporter, metric_reader, log_exporter)
