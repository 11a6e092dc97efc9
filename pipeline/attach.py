"""The attach stage: scores onto the spans, and out as score metrics and evaluation logs.

A trace's results, evaluator usage and processors' attributes go on its anchor span
(its root, or the earliest span), and each finding about one span on that span (on the
anchor when the trace has no span of that id); a closed session's go on a new carrier
span, in a trace of its own. The same results are recorded as score metrics and emitted as
evaluation log records, when those pipelines are configured.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spanscore.core.attributes import find_attribute
from spanscore.core.provenance import Provenance
from spanscore.core.session import Session
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.core.version import VERSION
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.score_attributes import (
    attach_attributes,
    attach_finding,
    attach_results,
    attach_usage,
    session_carrier,
)
from spanscore.pipeline.scoring import Scored
from spanscore.processors.agent_trace import agent_name_of


def _per_evaluator(usages: list[EvaluatorUsage]) -> list[EvaluatorUsage]:
    totals: dict[str, EvaluatorUsage] = {}
    for usage in usages:
        seen = totals.get(usage.evaluator)
        totals[usage.evaluator] = (
            usage
            if seen is None
            else EvaluatorUsage(
                usage.evaluator,
                seen.calls + usage.calls,
                seen.input_tokens + usage.input_tokens,
                seen.output_tokens + usage.output_tokens,
            )
        )
    return list(totals.values())


class ScoreAttacher:
    """Called on the collector's event loop; mutates only the span it attaches to."""

    def __init__(
        self,
        counts: PipelineCounts,
        clock: Callable[[], float],
        span_events: bool = True,
        score_metrics: ScoreMetrics | None = None,
        evaluation_logs: EvaluationLogs | None = None,
    ):
        self.counts = counts
        self.clock = clock
        self.span_events = span_events
        self.score_metrics = score_metrics
        self.evaluation_logs = evaluation_logs
        self.provenance: dict[str, Provenance] = {}  # by metric name, set once scoring started

    def attach(self, trace: Trace, scored: Scored) -> None:
        results, usages, attributes = scored.results, scored.usages, scored.attributes
        self._count(usages)
        trace.results = results
        anchor = trace.anchor
        if anchor is not None:
            if results:
                attach_results(anchor, results, provenance=self.provenance, span_events=self.span_events)
                if self.evaluation_logs is not None:
                    self.evaluation_logs.emit(anchor, results)
            for usage in _per_evaluator(usages):  # two processors may pay the same judge
                attach_usage(anchor, usage)
            attach_attributes(anchor, attributes)
        if scored.findings:
            self._attach_findings(trace, scored.findings)
        if self.score_metrics is not None and (results or usages or scored.findings):
            agent = agent_name_of(trace)
            self._record(results, usages, trace.service_name, agent, attributes)
            self.score_metrics.record_findings(scored.findings, trace.service_name, agent)

    def _attach_findings(self, trace: Trace, findings: list[SpanFinding]) -> None:
        wanted = {finding.span_id for finding in findings}
        spans = {span.span_id: span for span, _ in trace.spans() if span.span_id in wanted}
        for finding in findings:
            span = spans.get(finding.span_id, trace.anchor)
            if span is None:
                continue
            if self.span_events:
                attach_finding(span, finding)
            if self.evaluation_logs is not None:
                self.evaluation_logs.emit_finding(span, finding)

    def carrier(self, session: Session, scored: Scored, start_ns: int) -> Trace | None:
        """The trace of a carrier span with the session's results and attributes (metrics
        skipped among them), or None when it has neither."""
        attributes, usages = scored.attributes, scored.usages
        self._count(usages)
        session.results.extend(scored.results)
        if not session.results and not attributes:
            return None
        if self.score_metrics is not None:
            service = find_attribute(session.resource.attributes, "service.name")
            self._record(session.results, usages, service, None, attributes)
        resource_spans = session_carrier(session, start_ns, time.time_ns(), VERSION, self.provenance, self.span_events)
        scope_spans = resource_spans.scope_spans[0]
        span = scope_spans.spans[0]
        attach_attributes(span, attributes)
        if self.evaluation_logs is not None:
            self.evaluation_logs.emit(span, session.results)
        for usage in _per_evaluator(usages):
            attach_usage(span, usage)
        carrier = Trace(span.trace_id, self.clock())
        carrier.session_id = session.session_id
        carrier.results = session.results
        carrier.add(0, span, ScopeOrigin(resource_spans, scope_spans))
        return carrier

    def _count(self, usages: list[EvaluatorUsage]) -> None:
        for usage in usages:
            self.counts.evaluator_calls[usage.evaluator] += usage.calls

    def _record(self, results, usages, service, agent, attributes) -> None:
        if results:
            self.score_metrics.record(results, service, agent, attributes, self.provenance)
        for usage in usages:
            self.score_metrics.record_usage(usage, service, agent)
