"""Span-level results sorted from the trace's own, and their roll-up on the root.

A `MetricResult` with a `span_id` is about that span: it is written there. So that the
trace still answers "did anything fail" where every trace metric answers it, the root
gets one result per span-level metric: its score the lowest of its spans', failing when
any span failed, with the spans' count, lowest and mean score and failing count beside
it (`eval.<metric>.spans`, `.min`, `.mean`, `.failing`, `.errors`; docs/score-encoding.md).
A result naming a span the trace does not have is a processor's bug: the metric's root
result is then an error saying so, and nothing is written for it on any span.
An attribute naming a span (a result's context, such as the category a judge chose) goes
on that span; one naming a span the trace lacks is dropped, as its result is.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.span_attribute import SpanAttribute

log = logging.getLogger("spanscore.span_rollup")

UNKNOWN_SPAN = "unknown_span"  # error_type of a roll-up over results naming spans the trace lacks
_IDS_QUOTED = 3  # of the unknown span ids, in the error: enough to find the bug, bounded


@dataclass
class SortedResults:
    """A trace's results, sorted: those for its root (its own, then a roll-up per
    span-level metric), those for other spans, and the roll-ups' fields for the root."""

    trace: list[MetricResult] = field(default_factory=list)
    spans: list[MetricResult] = field(default_factory=list)
    rollup_fields: list[SpanAttribute] = field(default_factory=list)


def sort_results(results: Sequence[MetricResult], span_ids: Collection[str]) -> SortedResults:
    """`results` sorted by where they go, span-level ones checked against `span_ids` (hex,
    the trace's spans). A metric with a trace-level result keeps it: its spans' roll-up
    then adds only its fields beside it."""
    sorted_results = SortedResults()
    by_metric: dict[str, list[MetricResult]] = {}
    for result in results:
        if result.span_id is None:
            sorted_results.trace.append(result)
        else:
            by_metric.setdefault(result.name, []).append(result)
    scored_on_root = {result.name for result in sorted_results.trace}
    for name, on_spans in by_metric.items():
        known = [result for result in on_spans if result.span_id in span_ids]
        unknown = [result.span_id for result in on_spans if result.span_id not in span_ids]
        sorted_results.spans += known
        if unknown:
            rollup = MetricResult(
                name=name,
                threshold=on_spans[0].threshold,
                error=_unknown_spans(unknown, len(on_spans)),
                error_type=UNKNOWN_SPAN,
            )
            fields: list[SpanAttribute] = []
        else:
            rollup, fields = _rollup(name, known)
        if name not in scored_on_root:
            sorted_results.trace.append(rollup)
        sorted_results.rollup_fields += fields
    return sorted_results


def sort_attributes(
    attributes: Sequence[SpanAttribute], span_ids: Collection[str]
) -> tuple[list[SpanAttribute], list[SpanAttribute]]:
    """`attributes` sorted by where they go: the anchor's (no `span_id`), and those naming a
    span of `span_ids` (hex, the trace's spans). One naming another span is dropped with a
    debug log, not an error: context with no span to be read beside."""
    anchor: list[SpanAttribute] = []
    on_spans: list[SpanAttribute] = []
    for attribute in attributes:
        if attribute.span_id is None:
            anchor.append(attribute)
        elif attribute.span_id in span_ids:
            on_spans.append(attribute)
        else:
            log.debug("attribute %s dropped: it names span %s, not in the trace", attribute.key, attribute.span_id)
    return anchor, on_spans


def _rollup(name: str, results: Sequence[MetricResult]) -> tuple[MetricResult, list[SpanAttribute]]:
    keys = result_keys(name)
    scored = [result for result in results if result.score is not None]
    errors = len(results) - len(scored)
    fields = [SpanAttribute(keys.spans, len(results))]
    if errors:
        fields.append(SpanAttribute(keys.errors, errors))
    if not scored:
        first = next((result.error for result in results if result.error), None) or "no score"
        error = f"none of its {len(results)} spans could be scored; the first said: {first}"
        return MetricResult(name=name, threshold=results[0].threshold, error=error, error_type="error"), fields
    lowest = min(scored, key=lambda result: result.score or 0.0)
    failing = sum(1 for result in scored if result.passed is False)
    mean = sum(result.score or 0.0 for result in scored) / len(scored)
    fields += [
        SpanAttribute(keys.min, lowest.score or 0.0),
        SpanAttribute(keys.mean, mean),
        SpanAttribute(keys.failing, failing),
    ]
    explanation = f"{failing} of {len(results)} spans failing; lowest {lowest.score:.2f} on span {lowest.span_id}"
    if errors:
        explanation += f"; {errors} could not be scored"
    # The lowest result's own threshold: the roll-up fails exactly when that span did,
    # which is when any did (a metric has one threshold for all its spans).
    rollup = MetricResult(name=name, score=lowest.score, threshold=lowest.threshold, explanation=explanation)
    return rollup, fields


def _unknown_spans(span_ids: Sequence[str | None], total: int) -> str:
    quoted = ", ".join(str(span_id) for span_id in span_ids[:_IDS_QUOTED])
    more = f" and {len(span_ids) - _IDS_QUOTED} more" if len(span_ids) > _IDS_QUOTED else ""
    return f"{len(span_ids)} of its {total} span-level results name spans not in the trace: {quoted}{more}"
