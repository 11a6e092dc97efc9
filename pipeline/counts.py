"""What the pipeline's stages count, in one place the self-telemetry reads.

Every stage adds to the counts it owns; nothing else writes them. `held_spans` is the
one shared: intake adds what it takes, fan-out subtracts what every exporter is done with,
and intake refuses new requests while it is at `max_held_spans`. The metrics that report
them are declared here, beside them; the replayed spans only when a write-ahead log is
kept (the intake reports them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from spanscore.core.telemetry import Readout, TelemetryMetric

MAX_HELD_SPANS = TelemetryMetric(
    "spanscore_pipeline_held_spans_limit", "{span}", "The held-spans bound past which requests are refused", "gauge"
)
HELD_SPANS = TelemetryMetric(
    "spanscore_pipeline_held_spans", "{span}", "Spans held: assembling, scoring or exporting", "gauge"
)
RECEIVED_SPANS = TelemetryMetric(
    "otelcol_receiver_accepted_spans", "{span}", "Spans accepted by the receivers", "counter"
)
REJECTED_SPANS = TelemetryMetric(
    "spanscore_receiver_rejected_spans", "{span}", "Malformed spans dropped from otherwise valid requests", "counter"
)
REFUSED_REQUESTS = TelemetryMetric(
    "spanscore_receiver_refused_requests",
    "{request}",
    "Requests turned away while the pipeline was full, for the client to retry",
    "counter",
)
REPLAYED_SPANS = TelemetryMetric(
    "spanscore_write_ahead_replayed_spans", "{span}", "Spans replayed from the write-ahead log at start", "counter"
)
EXPORTED_TRACES = TelemetryMetric(
    "spanscore_pipeline_exported_traces", "{trace}", "Traces handed to every exporter", "counter"
)
UNSCORED_TRACES = TelemetryMetric(
    "spanscore_pipeline_unscored_traces", "{trace}", "Traces forwarded outside the scoring scope", "counter"
)
ROUTED_OUT_TRACES = TelemetryMetric(
    "spanscore_router_dropped_traces", "{trace}", "Traces the score_router sent to no exporter", "counter"
)


@dataclass
class PipelineCounts:
    max_held_spans: int
    held_spans: int = 0  # received, not yet done with by every exporter
    received_spans: int = 0
    rejected_spans: int = 0  # malformed spans dropped from otherwise valid requests
    refused_requests: int = 0  # turned away while full, for the client to retry
    replayed_spans: int = 0  # taken back from the write-ahead log at start
    exported_traces: int = 0
    unscored_traces: int = 0  # outside the scoring scope, forwarded as received
    routed_out_traces: int = 0  # routed to no exporter by the score router
    evaluator_calls: Counter[str] = field(default_factory=Counter)  # requests per evaluator ("judge")

    def telemetry(self) -> list[Readout]:
        return [
            RECEIVED_SPANS.reads(lambda: self.received_spans),
            REJECTED_SPANS.reads(lambda: self.rejected_spans),
            REFUSED_REQUESTS.reads(lambda: self.refused_requests),
            EXPORTED_TRACES.reads(lambda: self.exported_traces),
            UNSCORED_TRACES.reads(lambda: self.unscored_traces),
            ROUTED_OUT_TRACES.reads(lambda: self.routed_out_traces),
            HELD_SPANS.reads(lambda: self.held_spans),
            MAX_HELD_SPANS.reads(lambda: self.max_held_spans),
        ]
