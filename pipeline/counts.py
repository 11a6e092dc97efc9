"""What the pipeline's stages count, in one place the self-telemetry reads.

Every stage adds to the counts it owns; nothing else writes them. `held_spans` is the
one shared: intake adds what it takes, fan-out subtracts what every exporter is done with,
and intake refuses new requests while it is at `max_held_spans`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


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
