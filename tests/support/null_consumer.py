"""A consumer that does nothing with what it is given, for receivers built without a pipeline."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.consumer import NO_RESERVATION, ConsumeOutcome, Reservation


class NullConsumer:
    def check_capacity(self) -> None:
        return None

    def reserve(self, cost_bytes: int) -> Reservation:
        return NO_RESERVATION

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        return ConsumeOutcome(accepted=0, rejected=0)

    async def durable(self, outcome: ConsumeOutcome) -> None:
        return None
