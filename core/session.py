"""A session: the traces that share a session id, remembered after they were forwarded.

Only what session metrics and the carrier span need is kept per trace (ids, start time,
scores); the spans themselves leave memory when the trace is exported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from spanscore.core.result import MetricResult
from spanscore.core.trace import Trace


@dataclass(frozen=True)
class TraceSummary:
    trace_id: bytes
    anchor_span_id: bytes | None  # the span carrying the trace's scores (its root when complete)
    start_time_unix_nano: int
    complete: bool
    scores: dict[str, float]  # metric name -> score, for the metrics that produced one

    @classmethod
    def of(cls, trace: Trace, scores: dict[str, float] | None = None) -> TraceSummary:
        """`scores` when given, else those of the trace's results."""
        return cls(
            trace_id=trace.trace_id,
            anchor_span_id=anchor.span_id if (anchor := trace.anchor) is not None else None,
            start_time_unix_nano=trace.start_time_unix_nano,
            complete=trace.complete,
            scores={r.name: r.score for r in trace.results if r.score is not None} if scores is None else scores,
        )


@dataclass
class Session:
    """Traces of one session id in the order they were scored.

    Ownership: the pipeline owns it; trace processors may read it (previous traces of
    the session) and keep their own per-session state in `state[<processor id>]`;
    session processors add results when it closes. Touched by one task at a time.
    """

    session_id: str
    resource: Resource  # the first trace's resource, for the carrier span
    last_activity: float
    traces: list[TraceSummary] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    results: list[MetricResult] = field(default_factory=list)
    # Write-ahead log records (request, trace id, spans) of its exported traces, done
    # with once the session closed: until then a crash replays them to rebuild it.
    unsettled: list[tuple[int, bytes, int]] = field(default_factory=list)
    # Set while a batch scores one of its traces: its next traces wait their turn.
    scoring: bool = False
    # It closed while being scored: the close runs once that batch is done.
    close_pending: bool = False
    # A shutdown left one of its traces unscored: its own metrics are skipped too.
    cut_off: bool = False
    # Which close of the session this is: 1 the first, 2.. once a late trace re-opened it.
    sequence: int = 1
    # (trace id, span id) of the carrier of its previous close, when one was sent by then.
    previous_carrier: tuple[bytes, bytes] | None = None
    # That of its own carrier, once sent: a re-opened session's carrier links to it.
    carrier_span: tuple[bytes, bytes] | None = None

    def replace_trace(self, summary: TraceSummary) -> bool:
        """Put the summary of a trace scored again in place of its earlier one; False when
        the trace is not one of the session's."""
        for index, earlier in enumerate(self.traces):
            if earlier.trace_id == summary.trace_id:
                self.traces[index] = summary
                return True
        return False

    def reopened(self, state: dict[str, Any], now: float) -> Session:
        """The session opened again by a late trace: its traces so far, the processors'
        state as it was before it closed (`state`), the next sequence; no results yet."""
        return Session(
            self.session_id,
            self.resource,
            now,
            traces=list(self.traces),
            state=state,
            sequence=self.sequence + 1,
            previous_carrier=self.carrier_span,
        )

    @property
    def signals(self) -> dict[str, dict[str, float]]:
        """Trace id (hex) -> {metric name: score} for every scored metric of every trace."""
        return {t.trace_id.hex(): dict(t.scores) for t in self.traces}
