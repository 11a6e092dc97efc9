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
A span scored again (a replayed file, a chained collector) has what the earlier scoring
wrote for the metrics scored now removed first, attributes and events: one result per
metric, the newest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Iterable, Mapping, Sequence

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from spanscore.core.attributes import find_attribute
from spanscore.core.evaluation_event import (
    EVALUATION_EVENT,
    EVALUATION_NAME,
    evaluation_attributes,
    finding_attributes,
)
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import (
    BLAMED_SPAN_IDS,
    PREFIX,
    PREVIOUS_CARRIER_LINK,
    SCOPE_NAME,
    SESSION_SPAN_NAME,
    SESSION_TRACE_COUNT,
    metric_of,
    parse_key,
    result_attributes,
    usage_attributes,
)
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage, per_evaluator
from spanscore.pipeline import score_wire


def _result_fields(
    results: Iterable[MetricResult], now_ns: int, provenance: Mapping[str, Provenance], span_events: bool
) -> tuple[list[tuple[str, str | float]], list[bytes]]:
    """The results' score attributes, and their evaluation events as span field bytes."""
    pairs: list[tuple[str, str | float]] = []
    events: list[bytes] = []
    for result in results:
        source = provenance.get(result.name, CODE_PROVENANCE)
        pairs += result_attributes(result, source)
        if span_events:
            attributes = evaluation_attributes(result, source)
            events.append(score_wire.span_event(now_ns, EVALUATION_EVENT, attributes.items()))
    return pairs, events


def attach_results(
    span: Span,
    results: Sequence[MetricResult],
    now_ns: int | None = None,
    provenance: Mapping[str, Provenance] | None = None,
    span_events: bool = True,
) -> list[str]:
    """Add score attributes (and, with `span_events`, evaluation events) for `results` to
    `span` in place; `provenance` by metric name (code when a metric is not in it).

    A span scored before (a trace scored twice) first loses what that scoring wrote for
    these metrics (`clear_results`); other attributes already on it are overwritten
    rather than duplicated, since OTLP attribute keys must be unique. Returns the span
    ids (hex) the removed results had blamed: their findings are on those spans.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    pairs, events = _result_fields(results, now_ns, provenance or {}, span_events)
    blamed: list[str] = []
    scored_before = _has_eval_keys(span)
    if scored_before:
        blamed = clear_results(span, {result.name for result in results})
    span.MergeFromString(_new_attributes(span, pairs, scored_before) + b"".join(events))
    return blamed


def _has_eval_keys(span: Span) -> bool:
    """Whether `span` has any `eval.*` attribute: else nothing spanscore writes is on it,
    and attaching needs no look at what is (the one pass over its keys it pays)."""
    return any(kv.key.startswith(PREFIX) for kv in span.attributes)


def clear_results(span: Span, names: Collection[str]) -> list[str]:
    """Remove from `span` what an earlier scoring wrote for the metrics `names`: their
    `eval.<metric>.*` attributes and their `gen_ai.evaluation.result` events (events of a
    metric only where its attributes were, which is where spanscore's results are).
    Returns the span ids (hex) the removed `failure_localization` results had blamed."""
    attributes = span.attributes
    stale = [i for i, kv in enumerate(attributes) if (key := kv.key).startswith(PREFIX) and metric_of(key) in names]
    if not stale:
        return []
    carried = {metric_of(attributes[i].key) for i in stale}
    blamed = find_attribute(attributes, BLAMED_SPAN_IDS) if metric_of(BLAMED_SPAN_IDS) in carried else None
    for i in reversed(stale):
        del attributes[i]
    clear_events(span, carried)
    return blamed.split(",") if isinstance(blamed, str) and blamed else []


def carry_over(span: Span, earlier: Sequence[Span]) -> None:
    """Onto a session's carrier `span`, the results of earlier carriers of the session
    (newest first) for the metrics `span` has none of: the new carrier replaces them
    metric by metric, as scoring a span again does."""
    metrics = _result_metrics(span)
    for old in earlier:
        kept = _result_metrics(old) - metrics
        if not kept:
            continue
        present = {kv.key for kv in span.attributes}  # a metric skipped now has its skipped key
        span.attributes.extend(
            kv
            for kv in old.attributes
            if kv.key.startswith(PREFIX) and metric_of(kv.key) in kept and kv.key not in present
        )
        span.events.extend(
            event
            for event in old.events
            if event.name == EVALUATION_EVENT and find_attribute(event.attributes, EVALUATION_NAME) in kept
        )
        metrics |= kept


def _result_metrics(span: Span) -> set[str]:
    """The metrics `span` has a result of: every result writes `eval.<metric>.evaluator`
    (a skipped metric has none, so a result it had is kept beside the skip, as on traces)."""
    return {parsed[0] for kv in span.attributes if (parsed := parse_key(kv.key)) and parsed[1] == "evaluator"}


def clear_findings(trace: Trace, span_ids: Collection[str], names: Collection[str]) -> None:
    """Remove the findings of the metrics `names` from the spans `span_ids` (hex) of
    `trace`: the spans replaced results had blamed."""
    wanted = set(span_ids)
    for span, _ in trace.spans():
        if span.span_id.hex() in wanted:
            clear_events(span, names)


def clear_other_spans(trace: Trace, anchor: Span | None, names: Collection[str]) -> None:
    """Remove the results of the span-level metrics `names` from every span of `trace`
    but its `anchor` (whose roll-up `attach_results` replaces): scored again, a metric's
    spans are those it names now."""
    for span, _ in trace.spans():
        if span is not anchor and _has_eval_keys(span):
            clear_results(span, names)


def clear_events(span: Span, names: Collection[str]) -> None:
    """Remove `span`'s `gen_ai.evaluation.result` events of the metrics `names`."""
    events = span.events
    stale = [
        i
        for i, event in enumerate(events)
        if event.name == EVALUATION_EVENT and find_attribute(event.attributes, EVALUATION_NAME) in names
    ]
    for i in reversed(stale):
        del events[i]


def prepared_anchor(
    span: Span,
    results: Sequence[MetricResult],
    usages: Iterable[EvaluatorUsage],
    attributes: Iterable[SpanAttribute],
    provenance: Mapping[str, Provenance],
    span_events: bool,
) -> bytes | None:
    """Span field bytes appending what `attach_results`, `attach_usage` (per evaluator)
    and `attach_attributes` would add to `span`, in that order; None when `span` has one
    of those keys already, or results of these metrics (a trace scored twice), which only
    attaching replaces in place."""
    pairs, events = _result_fields(results, time.time_ns(), provenance, span_events)
    for usage in usages:
        pairs += usage_attributes(usage)
    pairs += [(attribute.key, attribute.value) for attribute in attributes]
    unique = dict(pairs)  # the last of a repeated key wins, where the first was: as attaching in turn does
    names = {result.name for result in results}
    for kv in span.attributes:
        key = kv.key
        if key.startswith(PREFIX) and (key in unique or metric_of(key) in names):
            return None
    return score_wire.span_attributes(unique.items()) + b"".join(events)


def attach_finding(span: Span, finding: SpanFinding, source: Provenance, now_ns: int | None = None) -> None:
    """The finding's `gen_ai.evaluation.result` event on `span`, the span it is about;
    `source`, the provenance of the finding's metric."""
    span.MergeFromString(finding_fields(finding, source, now_ns))


def finding_fields(finding: SpanFinding, source: Provenance, now_ns: int | None = None) -> bytes:
    """Span field bytes appending the finding's `gen_ai.evaluation.result` event."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return score_wire.span_event(now_ns, EVALUATION_EVENT, finding_attributes(finding, source).items())


def attach_usage(span: Span, usage: EvaluatorUsage) -> None:
    """`eval.<evaluator>.calls`, `.input_tokens` and `.output_tokens` on `span`."""
    span.MergeFromString(_new_attributes(span, usage_attributes(usage)))


def attach_attributes(span: Span, attributes: Iterable[SpanAttribute]) -> None:
    """Processors' `eval.*` attributes on `span`, replacing any of the same key."""
    pairs = [(attribute.key, attribute.value) for attribute in attributes]
    if pairs:
        span.MergeFromString(_new_attributes(span, pairs))


def _new_attributes(span: Span, pairs: Sequence[tuple[str, str | bool | int | float]], look: bool = True) -> bytes:
    """Wire bytes appending the pairs whose key `span` lacks; those it has get the new value
    in place (the last of a repeated key wins). `look=False`: the caller knows `span` has
    none of the (`eval.*`) keys."""
    keys = {key for key, _ in pairs}
    if len(keys) < len(pairs) or (look and any(kv.key in keys for kv in span.attributes)):
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
    results: Sequence[MetricResult],  # read twice when the span was scored before
    start_ns: int,
    end_ns: int,
    scope_version: str,
    provenance: Mapping[str, Provenance] | None = None,
    span_events: bool = True,
    attributes: Iterable[SpanAttribute] = (),
    usages: Iterable[EvaluatorUsage] = (),
    previous: tuple[bytes, bytes | None] | None = None,
) -> ResourceSpans:
    """A session's carrier trace: one span with its results, processors' attributes and
    evaluator usage (per evaluator), linked to the anchor span of each of its traces
    (`links`: trace id and anchor span id, None when the trace had no span), and last to
    `previous`, the carrier of the session's previous close, marked so."""
    span = Span(
        trace_id=random_id(16),
        span_id=random_id(8),
        name=SESSION_SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        status=Status(code=Status.STATUS_CODE_UNSET),
        attributes=[
            _kv("session.id", AnyValue(string_value=session_id)),
            _kv("gen_ai.conversation.id", AnyValue(string_value=session_id)),
            _kv("openinference.span.kind", AnyValue(string_value="EVALUATOR")),
            _kv(SESSION_TRACE_COUNT, AnyValue(int_value=len(links))),
        ],
        links=[Span.Link(trace_id=trace_id, span_id=span_id) for trace_id, span_id in links if span_id],
    )
    if previous is not None and previous[1]:
        marked = [_kv(PREVIOUS_CARRIER_LINK, AnyValue(bool_value=True))]
        span.links.append(Span.Link(trace_id=previous[0], span_id=previous[1], attributes=marked))
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


def random_id(size: int) -> bytes:
    while True:
        value = os.urandom(size)
        if any(value):
            return value
