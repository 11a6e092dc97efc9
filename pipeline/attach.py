"""The attach stage: scores onto the spans, and out as score metrics and evaluation logs.

A trace's results, evaluator usage and processors' attributes go on its anchor span
(its root, or the earliest span), and each finding about one span on that span (on the
anchor when the trace has no span of that id), unless a scoring worker encoded the
whole trace with them: the trace then carries those bytes for the exporters
(`Trace.encoded`). A closed session's go on a new carrier span, in a trace of its own.
The same results are recorded as score metrics and emitted as evaluation log records,
when those pipelines are configured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.attributes import find_attribute
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.session import Session
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import EvaluatorUsage, per_evaluator
from spanscore.core.version import VERSION
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_attributes import (
    attach_attributes,
    attach_finding,
    attach_results,
    attach_usage,
    carry_over,
    clear_findings,
    session_carrier,
)
from spanscore.pipeline.scoring import Scored
from spanscore.processors.agent_trace import agent_name_of


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

    def attach(self, trace: Trace, scored: Scored, observations: ScoreObservations | None = None) -> None:
        """Scores onto the trace's spans; its score metrics into `observations` when given
        (the caller records a batch's at once), else recorded now."""
        results, usages, attributes = scored.results, scored.usages, scored.attributes
        self._count(usages)
        trace.results = results
        anchor = trace.anchor
        prepared = scored.prepared
        if prepared is not None and prepared.encoded is not None:
            trace.encoded = prepared.encoded  # the worker sent the whole trace with its scores
        elif anchor is not None:
            if prepared is not None and prepared.anchor_span_id == anchor.span_id:
                anchor.MergeFromString(prepared.anchor)
            else:
                if results:
                    blamed = attach_results(anchor, results, provenance=self.provenance, span_events=self.span_events)
                    if blamed:  # scored before: the replaced results' findings go too
                        clear_findings(trace, blamed, {result.name for result in results})
                for usage in per_evaluator(usages):  # two processors may pay the same judge
                    attach_usage(anchor, usage)
                attach_attributes(anchor, attributes)
        if anchor is not None and results and self.evaluation_logs is not None:
            self.evaluation_logs.emit(anchor, results, self.provenance)
        if scored.findings and (trace.encoded is None or self.evaluation_logs is not None):
            self._attach_findings(trace, scored.findings, prepared)
        if self.score_metrics is not None and prepared is None and (results or usages or scored.findings):
            # A worker's observations of what it prepared arrive per round (observe).
            batch = observations if observations is not None else ScoreObservations()
            service, agent = trace.service_name, agent_name_of(trace)
            self._observe(batch, results, usages, service, agent, attributes)
            batch.add_findings(scored.findings, service, agent)
            if observations is None:
                self.score_metrics.record_observations(batch)

    def observe(self, observations: ScoreObservations) -> None:
        """Record score metrics summed elsewhere: a batch's (the scheduler passes them to
        `attach`), or a scoring worker's round of what it prepared."""
        if self.score_metrics is not None and observations:
            self.score_metrics.record_observations(observations)

    def _attach_findings(self, trace: Trace, findings: list[SpanFinding], prepared: PreparedScores | None) -> None:
        wanted = {finding.span_id for finding in findings}
        merged = prepared.findings if prepared is not None and trace.encoded is None else ()
        wanted.update(span_id for span_id, _ in merged)
        spans = {span.span_id: span for span, _ in trace.spans() if span.span_id in wanted}
        for span_id, fields in merged:
            span = spans.get(span_id)
            if span is not None:
                span.MergeFromString(fields)
        for finding in findings:
            span = spans.get(finding.span_id, trace.anchor)
            if span is None:
                continue
            source = self.provenance.get(finding.name, CODE_PROVENANCE)
            if self.span_events and prepared is None:
                attach_finding(span, finding, source)
            if self.evaluation_logs is not None:
                self.evaluation_logs.emit_finding(span, finding, source)

    def carrier(
        self, session: Session, scored: Scored | None, start_ns: int, earlier: Sequence[ResourceSpans] = ()
    ) -> Trace | None:
        """The trace of a carrier span with the session's results and attributes (metrics
        skipped among them), or None when it has neither. `earlier`: carriers of the
        session that arrived scored before (oldest first), which it replaces: their
        results of other metrics are carried over; without new results the newest of
        them is the carrier."""
        resource_spans = None if scored is None else self._new_carrier(session, scored, start_ns)
        if earlier:
            earlier_spans = [rs.scope_spans[0].spans[0] for rs in reversed(earlier)]
            if resource_spans is None:
                resource_spans, earlier_spans = earlier[-1], earlier_spans[1:]
            carry_over(resource_spans.scope_spans[0].spans[0], earlier_spans)
        if resource_spans is None:
            return None
        scope_spans = resource_spans.scope_spans[0]
        span = scope_spans.spans[0]
        if self.evaluation_logs is not None and scored is not None:
            self.evaluation_logs.emit(span, session.results, self.provenance)
        carrier = Trace(span.trace_id, self.clock())
        carrier.session_id = session.session_id
        carrier.results = session.results
        carrier.add(0, span, ScopeOrigin(resource_spans, scope_spans))
        return carrier

    def _new_carrier(self, session: Session, scored: Scored, start_ns: int) -> ResourceSpans | None:
        attributes, usages = scored.attributes, scored.usages
        self._count(usages)
        session.results.extend(scored.results)
        prepared = scored.prepared
        if prepared is not None:
            if prepared.carrier is None:
                return None
            return ResourceSpans.FromString(prepared.carrier)
        if not session.results and not attributes:
            return None
        if self.score_metrics is not None:
            service = find_attribute(session.resource.attributes, "service.name")
            observations = ScoreObservations()
            self._observe(observations, session.results, usages, service, None, attributes)
            self.score_metrics.record_observations(observations)
        return session_carrier(
            session, start_ns, time.time_ns(), VERSION, self.provenance, self.span_events, attributes, usages
        )

    def _count(self, usages: list[EvaluatorUsage]) -> None:
        for usage in usages:
            self.counts.evaluator_calls[usage.evaluator] += usage.calls

    def _observe(self, observations, results, usages, service, agent, attributes) -> None:
        observations.add_results(
            results, service, agent, attributes, self.score_metrics.span_attributes, self.provenance
        )
        for usage in usages:
            observations.add_usage(usage, service, agent)
