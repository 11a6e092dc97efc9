"""What receivers hand their data to: the traces consumer contract.

Receivers never see the concrete pipeline (as the Collector's receivers see only a
`consumer.Traces`): they call `check_capacity` before paying for a parse, then `consume`
with the parsed request, and map the two exceptions below to protocol statuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass(frozen=True)
class ConsumeOutcome:
    accepted: int
    rejected: int
    error: str | None = None  # the first reason a span was rejected
    record: int | None = None  # sequence number in the write-ahead log


class ConsumerFull(Exception):
    """Too much is held downstream; the client should retry after `retry_after_s`.

    Receivers answer HTTP 503 with Retry-After, or gRPC UNAVAILABLE with RetryInfo.
    """

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class WithoutWriteAhead:
    """A consumer whose requests stay out of the write-ahead log, for a receiver with
    `write_ahead: false` (traffic that may be lost in a crash, at no disk cost)."""

    def __init__(self, consumer: TracesConsumer):
        self.consumer = consumer

    def check_capacity(self) -> None:
        self.consumer.check_capacity()

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        return self.consumer.consume(request, None, write_ahead=False)

    async def durable(self, outcome: ConsumeOutcome) -> None:
        await self.consumer.durable(outcome)


class TracesConsumer(Protocol):
    """Takes parsed OTLP trace requests. Called on the collector's event loop.

    Ownership: `consume` takes the request; the caller must not read or mutate it
    afterwards (its spans are forwarded, and scored in place, later).
    """

    def check_capacity(self) -> None:
        """Raise ConsumerFull when nothing more can be taken now."""

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        """Take every valid span of `request`; raises ConsumerFull.

        `data` is the request's protobuf encoding when the receiver has it (kept by a
        write-ahead log rather than encoding the request again); `write_ahead=False`
        keeps the request out of the log (a receiver that opted out).
        """

    async def durable(self, outcome: ConsumeOutcome) -> None:
        """Return once what `consume` took is stored as the write-ahead policy promises;
        receivers acknowledge the client only then."""
