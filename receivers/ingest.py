"""What both OTLP receivers do with a parsed request, and the errors they map to statuses."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from spanscore.core.consumer import TracesConsumer


class InvalidRequest(Exception):
    """The request cannot be used: HTTP 400 / gRPC INVALID_ARGUMENT; the client must not retry."""


def ingest(consumer: TracesConsumer, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
    """Hand `request` to the consumer; spans with invalid ids are reported as partial success.

    Raises ConsumerFull (retryable) or InvalidRequest when every span was invalid.
    """
    outcome = consumer.consume(request)
    if outcome.rejected and not outcome.accepted:
        raise InvalidRequest(f"all {outcome.rejected} spans rejected; first problem: {outcome.error}")
    response = ExportTraceServiceResponse()
    if outcome.rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(
                rejected_spans=outcome.rejected,
                error_message=f"{outcome.rejected} spans rejected; first problem: {outcome.error}",
            )
        )
    return response
