"""Intake, the pipeline's first stage: receive -> write-ahead -> assemble.

Receivers hand it parsed requests (it is their `TracesConsumer`): it refuses them while
the pipeline holds `max_held_spans` or the write-ahead log is full, writes what it
accepts to the log (when one is kept) and gives the spans to the assembler. At start it
takes back what the log held, less the traces already exported.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import replace

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.consumer import NO_RESERVATION, ConsumeOutcome, ConsumerFull, Reservation
from spanscore.core.request_wire import RequestWire
from spanscore.core.telemetry import Readout
from spanscore.extensions.write_ahead_log import Replayed
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.counts import REPLAYED_SPANS, PipelineCounts
from spanscore.pipeline.log_retention import LogRetention

log = logging.getLogger("spanscore.pipeline")


class Intake:
    """The traces consumer receivers call, on the collector's event loop."""

    def __init__(
        self,
        assembler: Assembler,
        counts: PipelineCounts,
        clock: Callable[[], float],
        book: LogRetention | None = None,
        keep_wire: bool = False,
    ):
        self.assembler = assembler
        self.counts = counts
        self.clock = clock
        self.book = book
        # Scoring workers get each trace's spans as bytes: the requests' own are kept
        # with their spans, to be sliced rather than serialized again.
        self.keep_wire = keep_wire
        self.retry_after_s = max(1, math.ceil(assembler.config.trace_wait))

    def telemetry(self) -> list[Readout]:
        """The spans it took back from the write-ahead log, when one is kept."""
        return [] if self.book is None else [REPLAYED_SPANS.reads(lambda: self.counts.replayed_spans)]

    def check_capacity(self) -> None:
        """Raise ConsumerFull when at the span bound; receivers call it before parsing."""
        counts = self.counts
        if counts.held_spans >= counts.max_held_spans:
            counts.refused_requests += 1
            raise ConsumerFull(
                f"spanscore is holding {counts.held_spans} spans, its limit; retry later", self.retry_after_s
            )
        if self.book is not None and self.book.log.full:
            counts.refused_requests += 1
            raise ConsumerFull(
                f"the write-ahead log holds {self.book.log.bytes_on_disk >> 20} MiB, its limit, "
                "until exports catch up; retry later",
                self.retry_after_s,
            )

    def reserve(self, cost_bytes: int) -> Reservation:
        return NO_RESERVATION  # memory is the memory_limiter's to bound

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        """Take a parsed request; raises ConsumerFull."""
        self.check_capacity()
        wal = self.book.log if self.book is not None and write_ahead else None
        record = None if wal is None else wal.next_sequence
        wire = RequestWire(data) if self.keep_wire and data is not None else None
        outcome = self.assembler.add(request, self.clock(), record, wire)
        if wal is not None and outcome.accepted:
            wal.append(data if data is not None else request.SerializeToString(), outcome.accepted)
            outcome = replace(outcome, record=record)
        self.counts.held_spans += outcome.accepted
        self.counts.received_spans += outcome.accepted
        self.counts.rejected_spans += outcome.rejected
        return outcome

    async def durable(self, outcome: ConsumeOutcome) -> None:
        if outcome.record is not None and self.book is not None:  # only the book's log numbers records
            await self.book.log.durable(outcome.record)

    def replay(self, requests: list[Replayed]) -> None:
        """Take back what the write-ahead log held at start, without the traces already exported."""
        book = self.book
        if book is None:
            raise RuntimeError("replay takes back the write-ahead log's requests, and this pipeline keeps no log")
        wal = book.log
        now = self.clock()
        for replayed in requests:
            request = ExportTraceServiceRequest.FromString(replayed.data)
            if replayed.exported_traces:
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        keep = [s for s in scope_spans.spans if s.trace_id not in replayed.exported_traces]
                        if len(keep) < len(scope_spans.spans):
                            del scope_spans.spans[:]
                            scope_spans.spans.extend(keep)
            book.rescore_only(replayed.rescore_traces)
            outcome = self.assembler.add(request, now, replayed.sequence)
            wal.adopt(replayed.sequence, outcome.accepted)
            self.counts.held_spans += outcome.accepted
            self.counts.replayed_spans += outcome.accepted
        if requests:
            log.warning(
                "replayed %d spans of %d requests from the write-ahead log", self.counts.replayed_spans, len(requests)
            )
