"""What an OTLP backend answers to a trace export, as both OTLP exporters (gRPC, HTTP) read it."""

from __future__ import annotations

import logging

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from spanscore.core.quoting import excerpt


def warn_partial_success(log: logging.Logger, exporter_id: str, response: ExportTraceServiceResponse) -> None:
    """Log the spans a backend accepted the request but rejected, and its reason, when it gives either."""
    partial = response.partial_success
    if partial.rejected_spans or partial.error_message:
        log.warning(
            "exporter %s: backend rejected %d spans: %s",
            exporter_id,
            partial.rejected_spans,
            excerpt(partial.error_message),  # the backend's text can quote the spans'
        )
