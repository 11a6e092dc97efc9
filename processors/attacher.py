"""Writes metric results onto spans: the score encoding contract of DESIGN.md.

Per trace, on its root span (the earliest span when no root arrived):
- attributes `eval.<metric>.score` (double), `.label` (`pass`/`fail`), `.explanation`,
  or `.error` without a score, searchable in Jaeger tags and Tempo TraceQL, and
  `.evaluator` and `.revision`, who scored it by which definition (core.provenance);
- one span event `gen_ai.evaluation.result` per result with the OTel GenAI evaluation
  attributes (`error.type` on failure), unless span events are switched off.
Session results go on a new `evaluate_session` carrier span in a trace of its own,
linked to the scored span of every trace of the session.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from spanscore.core.evaluation_event import EVALUATION_EVENT, evaluation_attributes
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage

SESSION_SPAN_NAME = "evaluate_session"
SCOPE_NAME = "spanscore"


def attach_results(span: Span, results: Iterable[MetricResult], now_ns: int | None = None,
                   provenance: Mapping[str, Provenance] | None = None, span_events: bool = True) -> None:
    """Add score attributes (and, with `span_events`, evaluation events) for `results` to
    `span` in place; `provenance` by metric name (code when a metric is not in it).

    An attribute that already exists on the span (a trace scored twice) is overwritten
    rather than duplicated, since OTLP attribute keys must be unique.
    """
    now_ns = time.time_ns() if now_ns is None else now_ns
    provenance = provenance or {}
    values: list[KeyValue] = []
    events: list[Span.Event] = []
    for result in results:
        prefix = f"eval.{result.name}."
        source = provenance.get(result.name, CODE_PROVENANCE)
        values.append(KeyValue(key=prefix + "evaluator", value=AnyValue(string_value=source.evaluator)))
        values.append(KeyValue(key=prefix + "revision", value=AnyValue(string_value=source.revision)))
        if result.score is not None:
            values.append(KeyValue(key=prefix + "score", value=AnyValue(double_value=result.score)))
            values.append(KeyValue(key=prefix + "label", value=AnyValue(string_value=result.label)))
        if result.explanation:
            values.append(KeyValue(key=prefix + "explanation", value=AnyValue(string_value=result.explanation)))
        if result.error is not None:
            values.append(KeyValue(key=prefix + "error", value=AnyValue(string_value=result.error)))
        if span_events:
            events.append(evaluation_event(result, now_ns))
    _set_attributes(span, values)
    if events:
        span.events.extend(events)


def _set_attributes(span: Span, values: list[KeyValue]) -> None:
    """Append `values` to the span's attributes, replacing those whose key it has already.

    Built messages are appended in one call: adding them one by one, each copied into
    place, costs several times more, and scores are written on every scored trace.
    """
    attributes = span.attributes
    keys = {kv.key for kv in values}
    if len(keys) < len(values) or any(kv.key in keys for kv in attributes):
        new = {kv.key: kv for kv in values}  # the last of a repeated key wins
        for kv in attributes:
            replacement = new.pop(kv.key, None)
            if replacement is not None:
                kv.value.CopyFrom(replacement.value)
        values = list(new.values())
    attributes.extend(values)


def attach_usage(span: Span, usage: EvaluatorUsage) -> None:
    """`eval.<evaluator>.calls`, `.input_tokens` and `.output_tokens` on `span`."""
    existing = {kv.key: kv for kv in span.attributes}
    prefix = f"eval.{usage.evaluator}."
    for name, value in (("calls", usage.calls), ("input_tokens", usage.input_tokens),
                        ("output_tokens", usage.output_tokens)):
        key = prefix + name
        kv = existing.get(key) or span.attributes.add(key=key)
        kv.value.CopyFrom(AnyValue(int_value=int(value)))


def attach_attributes(span: Span, attributes: Iterable[SpanAttribute]) -> None:
    """Processors' `eval.*` attributes on `span`, replacing any of the same key."""
    existing = {kv.key: kv for kv in span.attributes}
    for attribute in attributes:
        kv = existing.get(attribute.key)
        if kv is None:
            kv = existing[attribute.key] = span.attributes.add(key=attribute.key)
        kv.value.CopyFrom(_any_value(attribute.value))


def _any_value(value: str | int | float | bool) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=value)


def evaluation_event(result: MetricResult, time_unix_nano: int) -> Span.Event:
    attributes = [KeyValue(key=key, value=AnyValue(string_value=value) if isinstance(value, str)
                           else AnyValue(double_value=value))
                  for key, value in evaluation_attributes(result).items()]
    return Span.Event(time_unix_nano=time_unix_nano, name=EVALUATION_EVENT, attributes=attributes)


def session_carrier(session: Session, start_ns: int, end_ns: int, scope_version: str,
                    provenance: Mapping[str, Provenance] | None = None, span_events: bool = True) -> ResourceSpans:
    """A one-span trace carrying the session's results, linked to each of its traces."""
    span = Span(
        trace_id=_random_nonzero(16),
        span_id=_random_nonzero(8),
        name=SESSION_SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        status=Status(code=Status.STATUS_CODE_UNSET),
        attributes=[
            _kv("session.id", AnyValue(string_value=session.session_id)),
            _kv("gen_ai.conversation.id", AnyValue(string_value=session.session_id)),
            _kv("openinference.span.kind", AnyValue(string_value="EVALUATOR")),
            _kv("eval.session.trace_count", AnyValue(int_value=len(session.traces))),
        ],
        links=[
            Span.Link(trace_id=t.trace_id, span_id=t.anchor_span_id)
            for t in session.traces
            if t.anchor_span_id
        ],
    )
    attach_results(span, session.results, now_ns=end_ns, provenance=provenance, span_events=span_events)
    resource_spans = ResourceSpans()
    resource_spans.resource.CopyFrom(session.resource)
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=scope_version))
    scope_spans.spans.append(span)
    return resource_spans


def is_session_carrier(trace: Trace) -> bool:
    """Whether `trace` is a session carrier spanscore wrote (a root `evaluate_session`
    span in the `spanscore` scope): a report of scores, not an agent's work."""
    root, origin = trace.root, trace.root_origin
    return (root is not None and origin is not None and root.name == SESSION_SPAN_NAME
            and origin.scope_spans.scope.name == SCOPE_NAME)


def _kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


def _random_nonzero(size: int) -> bytes:
    while True:
        value = os.urandom(size)
        if any(value):
            return value
