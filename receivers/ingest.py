"""What both OTLP receivers do with a parsed request, and the errors they map to statuses."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from spanscore.core.consumer import ConsumeOutcome, ConsumerFull, TracesConsumer

# Memory a request takes while it is read and decoded, per byte of its body (after
# decompression): the body itself, and what decoding builds from it. Measured with
# bench/decoding_memory.py: protobuf ~2.6x, OTLP/JSON ~6.8x (the parsed document, then
# the message built from it); the reservation a receiver makes before reading.
PROTOBUF_DECODING_FACTOR = 4
JSON_DECODING_FACTOR = 8


class InvalidRequest(Exception):
    """The request cannot be used: HTTP 400 / gRPC INVALID_ARGUMENT; the client must not retry."""


async def ingest(
    consumer: TracesConsumer, request: ExportTraceServiceRequest, data: bytes | None = None
) -> ExportTraceServiceResponse:
    """Hand `request` (encoded as `data`, when protobuf) to the consumer and wait until it
    is stored as durably as configured: the answer to send the client.

    Raises ConsumerFull (retryable) or InvalidRequest when every span was invalid.
    """
    response, outcome = accept(consumer, request, data)
    try:
        await consumer.durable(outcome)
    except OSError as exc:  # taken, but not known to be on disk: the client must send it again
        raise ConsumerFull(f"could not write the request to the write-ahead log: {exc}", 1) from exc
    return response


def accept(
    consumer: TracesConsumer, request: ExportTraceServiceRequest, data: bytes | None = None
) -> tuple[ExportTraceServiceResponse, ConsumeOutcome]:
    """`ingest` without waiting for durability: the answer, and what was taken."""
    outcome = consumer.consume(request, data)
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
    return response, outcome
