"""The attach stage: scores onto the spans, and out as score metrics and evaluation logs.

What a trace's or a closed session's scores write on spans is prepared by the score
writer (pipeline/score_writer.py), in the scoring worker that scored it or here for a
trace scored in this process; this stage merges it: the anchor span's fields, each
finding's on its span, the carrier span of a session (in a trace of its own), or, when
a worker encoded the whole trace with its scores, those bytes for the exporters
(`Trace.encoded`). The same results are recorded as score metrics and emitted as
evaluation log records, when those pipelines are configured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.session import Session
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.core.version import VERSION
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.late_rescores import trace_carrier
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_attributes import carry_over
from spanscore.pipeline.score_writer import ScoreWriter, findings_by_span, results_by_span
from spanscore.pipeline.scoring import Scored


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
        self.score_metrics = score_metrics
        self.evaluation_logs = evaluation_logs
        labels = score_metrics.span_attributes if score_metrics is not None else None
        self.writer = ScoreWriter(span_events=span_events, score_labels=labels)

    @property
    def provenance(self) -> Mapping[str, Provenance]:
        """By metric name, set once scoring started."""
        return self.writer.provenance

    @provenance.setter
    def provenance(self, provenance: Mapping[str, Provenance]) -> None:
        self.writer = dataclasses.replace(self.writer, provenance=provenance)

    def attach(self, trace: Trace, scored: Scored, observations: ScoreObservations | None = None) -> None:
        """Scores onto the trace's spans; its score metrics into `observations` when given
        (the caller records a batch's at once), else recorded now."""
        self._count(scored.usages)
        trace.results = scored.results
        trace.span_results = scored.span_results
        prepared = scored.prepared
        # A worker's observations of what it prepared arrive per round (observe).
        batch = None
        if prepared is None and self.score_metrics is not None:
            batch = observations if observations is not None else ScoreObservations()
        if prepared is not None and prepared.encoded is not None:
            trace.encoded = prepared.encoded  # the worker sent the whole trace with its scores
        elif prepared is None:
            prepared = self.writer.prepare_trace(trace, scored, batch)
            if prepared is None:
                self.writer.write_in_place(trace, scored)
                if batch is not None:
                    self.writer.observe_trace(batch, trace, scored)
        if prepared is not None and prepared.encoded is None:
            self._merge(trace, scored, prepared)
        self._emit_logs(trace, scored)
        if batch and observations is None and self.score_metrics is not None:
            self.score_metrics.record_observations(batch)

    def observe(self, observations: ScoreObservations) -> None:
        """Record score metrics summed elsewhere: a batch's (the scheduler passes them to
        `attach`), or a scoring worker's round of what it prepared."""
        if self.score_metrics is not None and observations:
            self.score_metrics.record_observations(observations)

    def _merge(self, trace: Trace, scored: Scored, prepared: PreparedScores) -> None:
        anchor = trace.anchor
        if anchor is not None:
            if prepared.anchor_span_id == anchor.span_id:
                anchor.MergeFromString(prepared.anchor)
            else:  # prepared for another anchor: written here, and the other spans' merged
                self.writer.write_in_place(trace, scored, other_spans=False)
        if prepared.span_fields:
            wanted = {span_id for span_id, _ in prepared.span_fields}
            spans = {span.span_id: span for span, _ in trace.spans() if span.span_id in wanted}
            for span_id, fields in prepared.span_fields:
                span = spans.get(span_id)
                if span is not None:
                    span.MergeFromString(fields)

    def _emit_logs(self, trace: Trace, scored: Scored) -> None:
        logs, anchor = self.evaluation_logs, trace.anchor
        if logs is None:
            return
        if anchor is not None and scored.results:
            logs.emit(anchor, scored.results, self.provenance)
        for span, results in results_by_span(trace, scored.span_results):
            logs.emit(span, results, self.provenance)
        for span, finding in findings_by_span(trace, scored.findings):
            logs.emit_finding(span, finding, self.provenance.get(finding.name, CODE_PROVENANCE))

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
        self._count(scored.usages)
        session.results.extend(scored.results)
        prepared = scored.prepared
        if prepared is not None:
            return None if prepared.carrier is None else ResourceSpans.FromString(prepared.carrier)
        observations = ScoreObservations() if self.score_metrics is not None else None
        links = [(t.trace_id, t.anchor_span_id) for t in session.traces]
        carrier = self.writer.carrier(
            session.session_id,
            session.resource,
            links,
            session.results,
            scored,
            start_ns,
            observations,
            previous=session.previous_carrier if session.sequence > 1 else None,
            rescore=session.sequence > 1,
        )
        if observations and self.score_metrics is not None:
            self.score_metrics.record_observations(observations)
        return carrier

    def rescore_carrier(
        self, trace: Trace, scored: Scored, start_ns: int, observations: ScoreObservations | None = None
    ) -> Trace | None:
        """The `evaluate_trace` carrier of a re-score of `trace` (late_rescores), or None
        when it has nothing to carry; its results counted as re-scores, not as results
        again, in `observations` when given, else recorded now."""
        return self._trace_carrier(trace, scored, start_ns, observations, self.writer.observe_rescore)

    def following_carrier(
        self, trace: Trace, scored: Scored, start_ns: int, observations: ScoreObservations | None = None
    ) -> Trace | None:
        """The `evaluate_trace` carrier of the results that follow `trace`, which left
        before its scoring ended (max_hold), or None when it has nothing to carry; they
        are the trace's first results of their metrics, counted as results."""
        return self._trace_carrier(trace, scored, start_ns, observations, self.writer.observe_trace)

    def _trace_carrier(
        self,
        trace: Trace,
        scored: Scored,
        start_ns: int,
        observations: ScoreObservations | None,
        observe: Callable[[ScoreObservations, Trace, Scored], None],
    ) -> Trace | None:
        self._count(scored.usages)
        carrier = trace_carrier(trace, scored, self.provenance, self.writer.span_events, VERSION, start_ns)
        if carrier is None:
            return None
        if self.score_metrics is not None:
            batch = observations if observations is not None else ScoreObservations()
            observe(batch, trace, scored)
            if observations is None:
                self.score_metrics.record_observations(batch)
        if self.evaluation_logs is not None and carrier.anchor is not None:
            self.evaluation_logs.emit(carrier.anchor, scored.results, self.provenance)
        return carrier

    def _count(self, usages: list[EvaluatorUsage]) -> None:
        for usage in usages:
            self.counts.evaluator_calls[usage.evaluator] += usage.calls
