"""`otlphttp` exporter: OTLP over HTTP (`POST <endpoint>/v1/traces`), protobuf or JSON."""

from __future__ import annotations

import gzip
import logging
from typing import Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from pydantic import Field, model_validator

from spanscore.core.auth import AuthSettings, client_headers
from spanscore.core.component import ComponentFactory, Host
from spanscore.core.export_request import build_request, serialized_request
from spanscore.core.otlp_json import encode_request
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig
from spanscore.exporters.http_client import client_session, post
from spanscore.exporters.otlp_response import warn_partial_success
from spanscore.exporters.tls import TlsClientConfig

log = logging.getLogger("spanscore.exporters.otlphttp")

TRACES_PATH = "/v1/traces"
METRICS_PATH = "/v1/metrics"
LOGS_PATH = "/v1/logs"
_RETRYABLE_STATUS = {429, 502, 503, 504}


class OtlpHttpExporterConfig(ExporterConfig):
    endpoint: str | None = None  # base URL; `/v1/traces` is appended
    traces_endpoint: str | None = None  # full URL, used as is
    metrics_endpoint: str | None = None  # full URL for the score metrics; default <endpoint>/v1/metrics
    logs_endpoint: str | None = None  # full URL for the evaluation events; default <endpoint>/v1/logs
    encoding: Literal["proto", "json"] = "proto"
    compression: Literal["gzip", "none"] = "gzip"
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # credentials, often
    auth: AuthSettings | None = None  # its authenticator's headers are sent beside `headers`
    tls: TlsClientConfig = Field(default_factory=TlsClientConfig)

    @model_validator(mode="after")
    def _has_url(self) -> OtlpHttpExporterConfig:
        url = self.url
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} must start with http:// or https://")
        return self

    @property
    def url(self) -> str:
        """The traces' URL; a config without one does not validate."""
        if self.traces_endpoint:
            return self.traces_endpoint
        if self.endpoint:
            return self.endpoint.rstrip("/") + TRACES_PATH
        raise ValueError("set endpoint (base URL) or traces_endpoint (full URL)")


class OtlpHttpExporter(Exporter):
    stores_requests = True  # can keep its sending queue in a storage extension

    config: OtlpHttpExporterConfig

    @property
    def sends_protobuf(self) -> bool:
        return self.config.encoding == "proto"

    async def open(self) -> None:
        config = self.config
        self._session = client_session(config.url, config.tls, config.sending_queue.num_consumers, config.timeout)
        self._content_type = "application/json" if config.encoding == "json" else "application/x-protobuf"
        self._headers = {**self.headers, "Content-Type": self._content_type}
        if config.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"

    async def send(self, traces: list[Trace]) -> None:
        if self.config.encoding == "json":
            await self._post(encode_request(build_request(traces)).encode())
        else:
            await self._post(serialized_request(traces))

    async def send_encoded(self, request: bytes) -> None:
        if self.config.encoding == "json":
            request = encode_request(ExportTraceServiceRequest.FromString(request)).encode()
        await self._post(request)

    async def _post(self, body: bytes) -> None:
        if self.config.compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
        url = self.config.url
        payload, content_type = await post(self._session, url, body, self._headers, _RETRYABLE_STATUS.__contains__)
        if payload and content_type == "application/x-protobuf":
            warn_partial_success(log, self.id, ExportTraceServiceResponse.FromString(payload))

    async def close(self) -> None:
        session = getattr(self, "_session", None)
        if session is not None:
            await session.close()


def metric_reader(component_id: str, config: OtlpHttpExporterConfig, interval_s: float, host: Host):
    """The score metrics over OTLP/HTTP (protobuf) with the same headers and TLS files."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    url = config.metrics_endpoint or (config.endpoint.rstrip("/") + METRICS_PATH if config.endpoint else None)
    if url is None:
        raise ValueError(f"exporter {component_id}: set metrics_endpoint (or endpoint) to send metrics")
    exporter = OTLPMetricExporter(**_sdk_exporter_settings(url, config, host))
    return PeriodicExportingMetricReader(exporter, export_interval_millis=interval_s * 1000)


def log_exporter(component_id: str, config: OtlpHttpExporterConfig, host: Host):
    """The evaluation events over OTLP/HTTP (protobuf) with the same headers and TLS files."""
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

    url = config.logs_endpoint or (config.endpoint.rstrip("/") + LOGS_PATH if config.endpoint else None)
    if url is None:
        raise ValueError(f"exporter {component_id}: set logs_endpoint (or endpoint) to send logs")
    return OTLPLogExporter(**_sdk_exporter_settings(url, config, host))


def _sdk_exporter_settings(url: str, config: OtlpHttpExporterConfig, host: Host) -> dict:
    from opentelemetry.exporter.otlp.proto.http import Compression

    return {
        "endpoint": url,
        "headers": client_headers(config, host),
        "timeout": config.timeout,
        "compression": Compression.Gzip if config.compression == "gzip" else Compression.NoCompression,
        "certificate_file": config.tls.ca_file if config.tls.ca_file else None,
        "client_certificate_file": config.tls.cert_file,
        "client_key_file": config.tls.key_file,
    }


FACTORY = ComponentFactory(
    "exporter", "otlphttp", OtlpHttpExporterConfig, OtlpHttpExporter, metric_reader, log_exporter
)
