"""What the pipeline hands scored traces to: the trace exporter contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from spanscore.core.component import Component
from spanscore.core.provenance import Provenance
from spanscore.core.telemetry import Readout, ReportsTelemetry, TelemetryMetric
from spanscore.core.trace import Trace

# Why spans were dropped, as the `reason` of otelcol_exporter_send_failed_spans.
DROP_REASONS = ("refused", "retries_exhausted", "shutdown")

SENT_SPANS = TelemetryMetric(
    "otelcol_exporter_sent_spans", "{span}", "Spans the exporters sent, by exporter", "counter"
)
SEND_FAILED_SPANS = TelemetryMetric(
    "otelcol_exporter_send_failed_spans",
    "{span}",
    "Spans the exporters gave up on, by exporter and reason (refused for good, retries exhausted, shutdown deadline)",
    "counter",
)


@runtime_checkable
class TraceExporter(Component, Protocol):
    """Takes scored traces from the pipeline; a Component (start, shutdown(deadline)).

    Threading: called on the collector's event loop. Ownership: a trace is lent
    read-only; the exporter calls `trace.export_done()` exactly once per enqueued trace,
    after it was sent or given up on (counted in `dropped_spans`, or in `kept_spans` when
    the write-ahead log keeps it: `trace.logged`), and keeps no reference afterwards:
    until then the pipeline counts its spans as held. `enqueue` must not block; after
    `shutdown` began it raises.
    """

    id: str  # the component id, which routes name
    sent_spans: int
    dropped_spans: int
    kept_spans: int  # given up on undelivered, kept by the write-ahead log for the next start

    @property  # read-only, so an exporter may count in a Counter
    def dropped_by_reason(self) -> Mapping[str, int]: ...  # the same spans by why: DROP_REASONS

    def enqueue(self, trace: Trace) -> None: ...


@runtime_checkable
class ReadsProvenance(Protocol):
    """An exporter that says who scored each result in its own terms (Phoenix's
    annotator kind): told, once scoring starts, the provenance of every metric the
    pipeline scores."""

    def read_provenance(self, provenance: Mapping[str, Provenance]) -> None: ...


def exporter_telemetry(exporter: TraceExporter) -> list[Readout]:
    """What every exporter counts by this contract, one series per exporter (and reason),
    then the metrics it reports of its own."""
    return [
        SEND_FAILED_SPANS.reads(
            lambda: [
                ({"exporter": exporter.id, "reason": reason}, exporter.dropped_by_reason.get(reason, 0))
                for reason in DROP_REASONS
            ]
        ),
        SENT_SPANS.reads(lambda: [({"exporter": exporter.id}, exporter.sent_spans)]),
        *(exporter.telemetry() if isinstance(exporter, ReportsTelemetry) else ()),
    ]
