"""The opentelemetry-sdk's own OTLP exporters as clients, one export call at a time, so a
test sees each call's result (SUCCESS or FAILURE) rather than a processor swallowing it."""

from __future__ import annotations

from pathlib import Path

import grpc
import requests
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def finished_spans(name: str) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("spanscore-tests").start_as_current_span(name):
        pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def export_over_grpc(
    port: int,
    name: str,
    *,
    ca_file: Path | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 5.0,
) -> SpanExportResult:
    """One export to 127.0.0.1:`port`, over TLS when `ca_file` is given; refusals are not retried."""
    credentials = None
    if ca_file is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca_file.read_bytes(),
            private_key=key_file.read_bytes() if key_file else None,
            certificate_chain=cert_file.read_bytes() if cert_file else None,
        )
    exporter = GrpcSpanExporter(
        endpoint=f"127.0.0.1:{port}",
        insecure=ca_file is None,
        credentials=credentials,
        headers=headers,
        timeout=timeout_s,
        retryable_error_codes=(),
    )
    try:
        return exporter.export(finished_spans(name))
    finally:
        exporter.shutdown()


def export_over_http(
    port: int,
    name: str,
    *,
    ca_file: Path | None = None,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 5.0,
) -> SpanExportResult:
    """One export to 127.0.0.1:`port`/v1/traces, https when `ca_file` is given."""
    scheme = "http" if ca_file is None else "https"
    # requests lets REQUESTS_CA_BUNDLE in the environment override the session's CA file
    # (psf/requests#3829); loopback needs nothing from the environment.
    session = requests.Session()
    session.trust_env = False
    exporter = HttpSpanExporter(
        endpoint=f"{scheme}://127.0.0.1:{port}/v1/traces",
        certificate_file=str(ca_file) if ca_file else None,
        client_certificate_file=str(cert_file) if cert_file else None,
        client_key_file=str(key_file) if key_file else None,
        headers=headers,
        timeout=timeout_s,
        session=session,
    )
    try:
        return exporter.export(finished_spans(name))
    finally:
        exporter.shutdown()


EXPORTS = {"grpc": export_over_grpc, "http": export_over_http}
