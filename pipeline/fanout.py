"""The fan-out stage: each trace to its exporters, chosen by the score router if one runs.

A trace's spans count as held until every exporter it went to is done with it (sent,
or given up on and counted as dropped by that exporter); then they are released, and
the write-ahead log, when kept, hears that the trace is done with. The score router
(`score_router`, configured among the processors as in the Collector's YAML) acts here:
it names the exporters for each trace from its results, and the matched routes are
written on the scored span as `eval.route`.
"""

from __future__ import annotations

from collections.abc import Mapping

from spanscore.core.routing import TraceRouter
from spanscore.core.score_encoding import ROUTE
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.trace_exporter import TraceExporter
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.log_retention import LogRetention
from spanscore.pipeline.score_attributes import attach_attributes


class FanOut:
    """Called on the collector's event loop; exporters call back through `trace.export_done`."""

    def __init__(
        self,
        exporters: list[TraceExporter],
        counts: PipelineCounts,
        router: TraceRouter | None = None,
        book: LogRetention | None = None,
        open_sessions: Mapping[str, Session] | None = None,
    ):
        self.exporters = exporters
        self.counts = counts
        self.router = router
        self.book = book
        self.open_sessions = open_sessions if open_sessions is not None else {}

    def export(self, trace: Trace) -> None:
        if self.book is not None and self.book.sent_before(trace):
            self._done(trace)
            return
        exporters = self.exporters
        if self.router is not None:
            route = self.router.route(trace.results, trace.trace_id)
            anchor = trace.anchor
            if route.matched and anchor is not None:
                attach_attributes(anchor, [SpanAttribute(ROUTE, ",".join(route.matched))])
            if route.exporters is not None:
                exporters = [e for e in exporters if e.id in route.exporters]
                if not exporters:
                    self.counts.routed_out_traces += 1
        if not exporters:
            self._done(trace)
            return
        trace.expect_exports(len(exporters), self._done)
        for exporter in exporters:
            exporter.enqueue(trace)

    def discard(self, trace: Trace) -> None:
        """Released without being sent: an earlier session carrier its session's new
        carrier replaces (it holds what it keeps of it)."""
        self._done(trace)

    def _done(self, trace: Trace) -> None:
        self.counts.held_spans -= trace.span_count
        self.counts.exported_traces += 1
        if self.book is not None:
            self.book.exported(trace, self.open_sessions)
