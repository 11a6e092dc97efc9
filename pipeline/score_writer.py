"""What a trace's or a session's scores write on spans, and the score metrics they count.

One path, wherever scoring ran: the attach stage calls it for traces scored in the
collector process, a scoring worker for the copies it scored, and either way the
outcome is the span field bytes the attach stage merges (`PreparedScores`): the anchor
span's results, evaluator usage and processors' attributes, span-level results and the
attributes naming a span on theirs, each finding's event on the
span it is about (on the anchor when the trace has no span of that id), a closed
session's carrier span, and the score metrics' observations of all of it. A trace whose
anchor was scored before (a replayed file, a chained collector) cannot take appended
bytes: what the earlier scoring wrote is replaced on the span itself (`write_in_place`),
which only the collector's own copy allows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from spanscore.core.attributes import find_attribute
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage, per_evaluator
from spanscore.core.version import VERSION
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_attributes import (
    attach_attributes,
    attach_finding,
    attach_results,
    attach_usage,
    carrier_spans,
    clear_findings,
    clear_other_spans,
    finding_fields,
    prepared_anchor,
)
from spanscore.pipeline.scoring import Scored
from spanscore.processors.agent_trace import agent_name_of
from spanscore.processors.span_target import span_kinds

# A trace of the session: its id and its anchor span's (None when it had no span).
Link = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class ScoreWriter:
    """How scores are written: who scored each metric (by name; code when missing),
    whether results are span events too, and the processors' attributes that label the
    score metrics (None: no score metrics, nothing observed)."""

    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    span_events: bool = True
    score_labels: frozenset[str] | None = None

    def prepare_trace(
        self, trace: Trace, scored: Scored, observations: ScoreObservations | None = None
    ) -> PreparedScores | None:
        """The trace's scores as span field bytes, its score metrics observed into
        `observations`; None (nothing observed) when it has no anchor, or its anchor or a
        span a span-level result or attribute names has some of the keys already:
        `write_in_place` then writes them."""
        anchor = trace.anchor
        if anchor is None:
            return None
        fields = prepared_anchor(
            anchor, scored.results, per_evaluator(scored.usages), scored.attributes, self.provenance, self.span_events
        )
        if fields is None:
            return None
        span_fields = []
        for span, results, attributes in span_outputs(trace, scored):
            one = prepared_anchor(span, results, (), attributes, self.provenance, self.span_events)
            if one is None:
                return None
            span_fields.append((span.span_id, one))
        if observations is not None:
            self.observe_trace(observations, trace, scored)
        span_fields += self._finding_fields(trace, scored.findings)
        return PreparedScores(anchor.span_id, fields, tuple(span_fields))

    def _finding_fields(self, trace: Trace, findings: Sequence[SpanFinding]) -> list[tuple[bytes, bytes]]:
        if not findings or not self.span_events:
            return []
        return [
            (span.span_id, finding_fields(finding, self.provenance.get(finding.name, CODE_PROVENANCE)))
            for span, finding in findings_by_span(trace, findings)
        ]

    def write_in_place(self, trace: Trace, scored: Scored, other_spans: bool = True) -> None:
        """The scores written on the trace's spans themselves, for a trace `prepare_trace`
        declined: the anchor's earlier results of these metrics (and the findings they
        had blamed) replaced, any key it has overwritten; with `other_spans`, span-level
        results and attributes on their spans (every other span's earlier results of their
        metrics removed first, so a span not scored now keeps none) and the findings on theirs."""
        anchor = trace.anchor
        if anchor is not None:
            if scored.results:
                blamed = attach_results(
                    anchor, scored.results, provenance=self.provenance, span_events=self.span_events
                )
                if blamed:  # scored before: the replaced results' findings go too
                    clear_findings(trace, blamed, {result.name for result in scored.results})
            for usage in per_evaluator(scored.usages):  # two processors may pay the same judge
                attach_usage(anchor, usage)
            attach_attributes(anchor, scored.attributes)
        if not other_spans:
            return
        if scored.span_results:
            clear_other_spans(trace, anchor, {result.name for result in scored.span_results})
        for span, results, attributes in span_outputs(trace, scored):
            if results:
                attach_results(span, results, provenance=self.provenance, span_events=self.span_events)
            attach_attributes(span, attributes)
        if not scored.findings or not self.span_events:
            return
        for span, finding in findings_by_span(trace, scored.findings):
            attach_finding(span, finding, self.provenance.get(finding.name, CODE_PROVENANCE))

    def observe_trace(self, observations: ScoreObservations, trace: Trace, scored: Scored) -> None:
        """The trace's results, usage and findings into the score metrics' `observations`."""
        service, agent = trace.service_name, agent_name_of(trace)
        self._observe(observations, scored.results, scored.usages, scored.attributes, service, agent)
        if scored.span_results:
            kinds = span_kinds(trace, {result.span_id for result in scored.span_results if result.span_id})
            observations.add_span_results(scored.span_results, kinds, service, agent, self.provenance)
        observations.add_findings(scored.findings, service, agent)

    def observe_rescore(self, observations: ScoreObservations, trace: Trace, scored: Scored) -> None:
        """A re-score's results into `observations` on the re-score counter only: the trace's
        first results stay the ones the score histogram and the results counter count."""
        observations.add_rescores(scored.results, trace.service_name, agent_name_of(trace), self.provenance)

    def carrier(
        self,
        session_id: str,
        resource: Resource,
        links: Sequence[Link],
        results: Sequence[MetricResult],
        scored: Scored,
        start_ns: int,
        observations: ScoreObservations | None = None,
        previous: Link | None = None,
        rescore: bool = False,
    ) -> ResourceSpans | None:
        """A closed session's carrier trace with `results` and the scoring's attributes and
        usage, linked to each of its traces (and to `previous`, the carrier of its previous
        close), its score metrics observed (with `rescore`, a session opened again by a late
        trace: on the re-score counter, as a trace's re-score); None (nothing observed)
        when it has neither results nor attributes."""
        if not results and not scored.attributes:
            return None
        if observations is not None:
            service = find_attribute(resource.attributes, "service.name")
            if rescore:  # its first close's results stay the ones counted as results
                observations.add_rescores(results, service, None, self.provenance)
                for usage in scored.usages:
                    observations.add_usage(usage, service, None)
            else:
                self._observe(observations, results, scored.usages, scored.attributes, service, None)
        return carrier_spans(
            session_id,
            resource,
            links,
            results,
            start_ns,
            time.time_ns(),
            VERSION,
            self.provenance,
            self.span_events,
            scored.attributes,
            scored.usages,
            previous,
        )

    def _observe(
        self,
        observations: ScoreObservations,
        results: Iterable[MetricResult],
        usages: Iterable[EvaluatorUsage],
        attributes: Iterable[SpanAttribute],
        service: str | None,
        agent: str | None,
    ) -> None:
        labels = self.score_labels or frozenset()
        observations.add_results(results, service, agent, attributes, labels, self.provenance)
        for usage in usages:
            observations.add_usage(usage, service, agent)


def results_by_span(trace: Trace, results: Sequence[MetricResult]) -> list[tuple[Span, list[MetricResult]]]:
    """Span-level `results` grouped by the span they name (every one names a span of the
    trace: `Scored.sort_spans` kept only those; of a repeated id, the last span, where
    the attach stage merges)."""
    if not results:
        return []
    wanted: dict[str, list[MetricResult]] = {}
    for result in results:
        wanted.setdefault(result.span_id or "", []).append(result)
    spans = {hex_id: span for span, _ in trace.spans() if (hex_id := span.span_id.hex()) in wanted}
    return [(spans[hex_id], found) for hex_id, found in wanted.items() if hex_id in spans]


def span_outputs(trace: Trace, scored: Scored) -> list[tuple[Span, list[MetricResult], list[SpanAttribute]]]:
    """The span-level results and attributes of `scored`, grouped by the span they name
    (`Scored.sort_spans` kept only spans of the trace; of a repeated id, the last span)."""
    if not scored.span_results and not scored.span_attributes:
        return []
    wanted: dict[str, tuple[list[MetricResult], list[SpanAttribute]]] = {}
    for result in scored.span_results:
        wanted.setdefault(result.span_id or "", ([], []))[0].append(result)
    for attribute in scored.span_attributes:
        wanted.setdefault(attribute.span_id or "", ([], []))[1].append(attribute)
    spans = {hex_id: span for span, _ in trace.spans() if (hex_id := span.span_id.hex()) in wanted}
    return [(spans[hex_id], *found) for hex_id, found in wanted.items() if hex_id in spans]


def findings_by_span(trace: Trace, findings: Sequence[SpanFinding]) -> list[tuple[Span, SpanFinding]]:
    """Each finding with the span it is about, or the trace's anchor when that span is not
    in the trace (a finding is never dropped); none when the trace has no anchor."""
    wanted = {finding.span_id for finding in findings}
    spans = {span.span_id: span for span, _ in trace.spans() if span.span_id in wanted} if findings else {}
    pairs = [(spans.get(finding.span_id, trace.anchor), finding) for finding in findings]
    return [(span, finding) for span, finding in pairs if span is not None]
