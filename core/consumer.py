"""What receivers hand their data to: the traces consumer contract.

Receivers never see the concrete pipeline (as the Collector's receivers see only a
`consumer.Traces`): they call `check_capacity` before paying for a parse, `reserve` the
memory the parse will take, then `consume` the parsed request, and map the exceptions
below to protocol statuses.
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


class TooCostly(Exception):
    """A request would take more memory to decode than the collector may ever give it:
    HTTP 413 / gRPC RESOURCE_EXHAUSTED; retrying cannot help."""


class Reservation(Protocol):
    """Memory counted for one request while it is read and decoded."""

    def grow(self, cost_bytes: int) -> None:
        """Count `cost_bytes` more (a body whose size was not known at first); raises
        ConsumerFull or TooCostly as `reserve` does."""

    def release(self) -> None:
        """The request is decoded and consumed, or refused; idempotent."""


class NoReservation:
    """For a consumer that bounds no memory."""

    def grow(self, cost_bytes: int) -> None:
        return None

    def release(self) -> None:
        return None


NO_RESERVATION = NoReservation()


class WithoutWriteAhead:
    """A consumer whose requests stay out of the write-ahead log, for a receiver with
    `write_ahead: false` (traffic that may be lost in a crash, at no disk cost)."""

    def __init__(self, consumer: TracesConsumer):
        self.consumer = consumer

    def check_capacity(self) -> None:
        self.consumer.check_capacity()

    def reserve(self, cost_bytes: int) -> Reservation:
        return self.consumer.reserve(cost_bytes)

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

    def reserve(self, cost_bytes: int) -> Reservation:
        """Count the memory a request will take while it is read and decoded (its body's
        size times its encoding's decoding factor) before paying it: raises ConsumerFull
        when that does not fit now, TooCostly when it never will. The caller releases
        the reservation once the request is consumed or refused."""
        ...

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        """Take every valid span of `request`; raises ConsumerFull.

        `data` is the request's protobuf encoding when the receiver has it (kept by a
        write-ahead log rather than encoding the request again); `write_ahead=False`
        keeps the request out of the log (a receiver that opted out).
        """
        ...

    async def durable(self, outcome: ConsumeOutcome) -> None:
        """Return once what `consume` took is stored as the write-ahead policy promises;
        receivers acknowledge the client only then."""
