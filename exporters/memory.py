"""An in-memory exporter: keeps a copy of what the pipeline hands over instead of sending it.

For code that builds a `Pipeline` directly (tests, embedders). It keeps the exporter
contract the pipeline relies on (`enqueue`, `trace.export_done()` exactly once per
trace, `dropped_spans`, the component lifecycle) without batching or retries. Each
trace is recorded as an `ExportedTrace`: the OTLP request an exporter would send for it,
rebuilt when it is enqueued, so scores written on the root span can be read back.

`hold()` makes it stop finishing traces, as a backend that does not answer: they are
recorded but `export_done` waits for `release()`, so the pipeline keeps counting their
spans as held (backpressure). At `shutdown` traces still held are given up on, counted
in `dropped_spans`, as the batching exporters do when the deadline passes.

Not in the config's component table: there is nothing to configure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.export_request import build_request
from spanscore.core.result import MetricResult
from spanscore.core.trace import Trace


@dataclass(frozen=True)
class ExportedTrace:
    """What the exporter was handed for one trace, copied: the trace itself is not kept."""

    trace_id: bytes
    session_id: str | None
    complete: bool
    late: bool
    results: Sequence[MetricResult]
    request: ExportTraceServiceRequest  # every span under its resource and scope
    anchor_span_id: bytes | None  # the span scores were written on

    @property
    def spans(self) -> list[Span]:
        return [s for rs in self.request.resource_spans for ss in rs.scope_spans for s in ss.spans]

    @property
    def span_names(self) -> list[str]:
        return [s.name for s in self.spans]

    @property
    def anchor(self) -> Span | None:
        """The root span, or the earliest span of a trace without one, as exported."""
        return next((s for s in self.spans if s.span_id == self.anchor_span_id), None)

    @property
    def anchor_attributes(self) -> dict[str, Any]:
        anchor = self.anchor
        return {} if anchor is None else attributes_to_dict(anchor.attributes)

    @property
    def scores(self) -> dict[str, float | None]:
        """Metric name -> score (None for an error result)."""
        return {r.name: r.score for r in self.results}


class MemoryExporter:
    """Records every trace enqueued; finishes it at once unless holding.

    Threading: everything runs on the collector's event loop.
    """

    def __init__(self, component_id: str = "memory", hold: bool = False):
        self.id = component_id
        self.exported: list[ExportedTrace] = []
        self.sent_spans = 0
        self.dropped_spans = 0
        self.kept_spans = 0  # never: nothing it gives up on is kept
        self.dropped_by_reason: Counter[str] = Counter()  # "shutdown" only: it never fails a send
        self.holding = hold
        self._held: list[Trace] = []
        self._shut_down = False

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        return None

    def enqueue(self, trace: Trace) -> None:
        if self._shut_down:
            raise RuntimeError(f"exporter {self.id} is shut down")
        anchor = trace.anchor
        self.exported.append(
            ExportedTrace(
                trace_id=trace.trace_id,
                session_id=trace.session_id,
                complete=trace.complete,
                late=trace.late,
                results=tuple(trace.results),
                request=build_request([trace]),
                anchor_span_id=None if anchor is None else anchor.span_id,
            )
        )
        if self.holding:
            self._held.append(trace)
        else:
            self._finish(trace)

    @property
    def held_traces(self) -> int:
        """Traces recorded but not yet finished (`export_done` not called)."""
        return len(self._held)

    def hold(self) -> None:
        """From now on keep traces unfinished until `release`."""
        self.holding = True

    def release(self) -> int:
        """Stop holding and finish every held trace; returns how many."""
        self.holding = False
        held, self._held = self._held, []
        for trace in held:
            self._finish(trace)
        return len(held)

    async def shutdown(self, deadline: float) -> None:
        """Give up on held traces (counted as dropped); safe without start and twice."""
        if self._shut_down:
            return
        self._shut_down = True
        held, self._held = self._held, []
        for trace in held:
            self.dropped_spans += trace.span_count
            self.dropped_by_reason["shutdown"] += trace.span_count
            trace.export_done()

    # Queries for tests ---------------------------------------------------------------

    def by_trace_id(self, trace_id: bytes) -> list[ExportedTrace]:
        """Every export of `trace_id`, in order (a trace and its late spans are two)."""
        return [e for e in self.exported if e.trace_id == trace_id]

    def only(self, trace_id: bytes) -> ExportedTrace:
        """The one export of `trace_id`; fails when there is none or several."""
        found = self.by_trace_id(trace_id)
        if len(found) != 1:
            raise LookupError(f"trace {trace_id.hex()} was exported {len(found)} times, not once")
        return found[0]

    def named(self, span_name: str) -> list[ExportedTrace]:
        """The exports holding a span called `span_name` (`evaluate_session` carriers, say)."""
        return [e for e in self.exported if span_name in e.span_names]

    def _finish(self, trace: Trace) -> None:
        self.sent_spans += trace.span_count
        trace.export_done()
