"""Writes metric results onto spans, as the score encoding (docs/score-encoding.md) says.

Per trace, on its root span (the earliest span when no root arrived):
- attributes `eval.<metric>.score` (double), `.label` (`pass`/`fail`), `.explanation`,
  or `.error` without a score, searchable in Jaeger tags and Tempo TraceQL, and
  `.evaluator` and `.revision`, who scored it by which definition (core.provenance);
- one span event `gen_ai.evaluation.result` per result with the OTel GenAI evaluation
  attributes (`error.type` on failure), unless span events are switched off.
A finding about one span (core.span_finding) goes on that span as its own
`gen_ai.evaluation.result` event.
Session results go on a new `evaluate_session` carrier span in a trace of its own,
linked to the scored span of every trace of the session.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from spanscore.core.evaluation_event import EVALUATION_EVENT, evaluation_attributes
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import SCOPE_NAME, SESSION_SPAN_NAME
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.usage import EvaluatorUsage, per_evaluator
from spanscore.pipeline import score_wire


def _result_fields(
    results: Iterable[MetricResult], now_ns: int, provenance: Mapping[str, Provenance], span_events: bool
) -> tuple[list[tuple[str, str | float]], list[bytes]]:
    """The results' score attributes, and their evaluation events as span field bytes."""
    pairs: list[tuple[str, str | float]] = []
    events: list[bytes] = []
    for result in results:
        prefix = f"eval.{result.name}."
        source = provenance.get(result.name, CODE_PROVENANCE)
        pairs.append((prefix + "evaluator", source.evaluator))
        pairs.append((prefix + "revision", source.revision))
        if result.score is not None:
            pairs.append((prefix + "score", float(result.score)))
            pairs.append((prefix + "label", result.label))
        if result.explanation:
            pairs.append((prefix + "explanation", result.explanation))
        if result.error is not None:
            pairs.append((prefix + "error", result.error))
        if span_events:
            events.append(score_wire.span_event(now_ns, EVALUATION_EVENT, evaluation_attributes(result).items()))
    return pairs, events


def attach_results(
    span: Span,
    results: Iterable[MetricResult],
    now_ns: int | None = None,
    provenance: Mapping[str, Provenance] | None = None,
    span_events: bool = True,
) -> None:
    """Add score attributes (and, with `span_events`, evaluation events) for `results` to
    `span` in place; `provenance` by metric name (code when a metric is not in it).

    An attribute that already exists on the span (a trace scored twice) is overwritten
    rather than duplicated, since OTLP attribute keys must be unique.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    pairs, events = _result_fields(results, now_ns, provenance or {}, span_events)
    span.MergeFromString(_new_attributes(span, pairs) + b"".join(events))


def prepared_anchor(
    span: Span,
    results: Iterable[MetricResult],
    usages: Iterable[EvaluatorUsage],
    attributes: Iterable[SpanAttribute],
    provenance: Mapping[str, Provenance],
    span_events: bool,
) -> bytes | None:
    """Span field bytes appending what `attach_results`, `attach_usage` (per evaluator)
    and `attach_attributes` would add to `span`, in that order; None when `span` has one
    of those keys already (a trace scored twice), which only attaching replaces in place."""
    pairs, events = _result_fields(results, time.time_ns(), provenance, span_events)
    for usage in usages:
        pairs += _usage_pairs(usage)
    pairs += [(attribute.key, attribute.value) for attribute in attributes]
    unique = dict(pairs)  # the last of a repeated key wins, where the first was: as attaching in turn does
    if any(kv.key in unique for kv in span.attributes):
        return None
    return score_wire.span_attributes(unique.items()) + b"".join(events)


def attach_finding(span: Span, finding: SpanFinding, now_ns: int | None = None) -> None:
    """The finding's `gen_ai.evaluation.result` event on `span`, the span it is about."""
    span.MergeFromString(finding_fields(finding, now_ns))


def finding_fields(finding: SpanFinding, now_ns: int | None = None) -> bytes:
    """Span field bytes appending the finding's `gen_ai.evaluation.result` event."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return score_wire.span_event(now_ns, EVALUATION_EVENT, finding.event_attributes().items())


def attach_usage(span: Span, usage: EvaluatorUsage) -> None:
    """`eval.<evaluator>.calls`, `.input_tokens` and `.output_tokens` on `span`."""
    span.MergeFromString(_new_attributes(span, _usage_pairs(usage)))


def _usage_pairs(usage: EvaluatorUsage) -> list[tuple[str, int]]:
    prefix = f"eval.{usage.evaluator}."
    return [
        (prefix + "calls", int(usage.calls)),
        (prefix + "input_tokens", int(usage.input_tokens)),
        (prefix + "output_tokens", int(usage.output_tokens)),
    ]


def attach_attributes(span: Span, attributes: Iterable[SpanAttribute]) -> None:
    """Processors' `eval.*` attributes on `span`, replacing any of the same key."""
    pairs = [(attribute.key, attribute.value) for attribute in attributes]
    if pairs:
        span.MergeFromString(_new_attributes(span, pairs))


def _new_attributes(span: Span, pairs: list[tuple[str, str | bool | int | float]]) -> bytes:
    """Wire bytes appending the pairs whose key `span` lacks; those it has get the new value
    in place (the last of a repeated key wins)."""
    keys = {key for key, _ in pairs}
    if len(keys) < len(pairs) or any(kv.key in keys for kv in span.attributes):
        new = dict(pairs)
        for kv in span.attributes:
            if kv.key in new:
                kv.value.Clear()
                kv.value.MergeFromString(score_wire.any_value(new.pop(kv.key)))
        pairs = list(new.items())
    return score_wire.span_attributes(pairs)


def session_carrier(
    session: Session,
    start_ns: int,
    end_ns: int,
    scope_version: str,
    provenance: Mapping[str, Provenance] | None = None,
    span_events: bool = True,
    attributes: Iterable[SpanAttribute] = (),
    usages: Iterable[EvaluatorUsage] = (),
) -> ResourceSpans:
    """A one-span trace carrying the session's results, linked to each of its traces."""
    links = [(t.trace_id, t.anchor_span_id) for t in session.traces]
    return carrier_spans(
        session.session_id,
        session.resource,
        links,
        session.results,
        start_ns,
        end_ns,
        scope_version,
        provenance,
        span_events,
        attributes,
        usages,
    )


def carrier_spans(
    session_id: str,
    resource: Resource,
    links: Sequence[tuple[bytes, bytes | None]],
    results: Iterable[MetricResult],
    start_ns: int,
    end_ns: int,
    scope_version: str,
    provenance: Mapping[str, Provenance] | None = None,
    span_events: bool = True,
    attributes: Iterable[SpanAttribute] = (),
    usages: Iterable[EvaluatorUsage] = (),
) -> ResourceSpans:
    """A session's carrier trace: one span with its results, processors' attributes and
    evaluator usage (per evaluator), linked to the anchor span of each of its traces
    (`links`: trace id and anchor span id, None when the trace had no span)."""
    span = Span(
        trace_id=_random_nonzero(16),
        span_id=_random_nonzero(8),
        name=SESSION_SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        status=Status(code=Status.STATUS_CODE_UNSET),
        attributes=[
            _kv("session.id", AnyValue(string_value=session_id)),
            _kv("gen_ai.conversation.id", AnyValue(string_value=session_id)),
            _kv("openinference.span.kind", AnyValue(string_value="EVALUATOR")),
            _kv("eval.session.trace_count", AnyValue(int_value=len(links))),
        ],
        links=[Span.Link(trace_id=trace_id, span_id=span_id) for trace_id, span_id in links if span_id],
    )
    attach_results(span, results, now_ns=end_ns, provenance=provenance, span_events=span_events)
    attach_attributes(span, attributes)
    for usage in per_evaluator(usages):
        attach_usage(span, usage)
    resource_spans = ResourceSpans()
    resource_spans.resource.CopyFrom(resource)
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=scope_version))
    scope_spans.spans.append(span)
    return resource_spans


def _kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


def _random_nonzero(size: int) -> bytes:
    while True:
        value = os.urandom(size)
        if any(value):
            return value
