"""SpanTarget: which spans a span-level metric scores, from config to the steps chosen."""

from __future__ import annotations

import pytest
import yaml
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span
from pydantic import ValidationError

from spanscore.core.sampling import span_sampled
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.processors.span_target import SpanTarget, span_kinds
from tests.support.agent_spans import TRACE_ID, make_span
from tests.support.spans import kv


def trace_of(spans: list[Span], service: str = "shop") -> Trace:
    resource_spans = ResourceSpans(resource=Resource(attributes=[kv("service.name", service)]))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.spans.extend(spans)
    trace = Trace(TRACE_ID, 0.0)
    origin = ScopeOrigin(resource_spans, scope_spans)
    for position, one in enumerate(scope_spans.spans):
        trace.add(position, one, origin)
    return trace


AGENT = make_span("agent", {"openinference.span.kind": "AGENT", "input.value": "Can I return it?"}, start=1)
RETRIEVER = make_span(
    "retrieve",
    {
        "openinference.span.kind": "RETRIEVER",
        "input.value": "returns",
        "retrieval.documents.0.document.content": "Returns within 30 days.",
    },
    parent=AGENT,
    start=2,
)
LLM_CHAT = make_span(
    "chat", {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.tier": "small"}, parent=AGENT, start=3
)
LLM_ANSWER = make_span(
    "answer", {"openinference.span.kind": "LLM", "llm.model_name": "m", "llm.tier": "large"}, parent=AGENT, start=4
)
TOOL = make_span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup"}, parent=AGENT, start=5)
HTTP = make_span("GET /orders", {"http.method": "GET"}, parent=TOOL, start=6)
SPANS = [AGENT, RETRIEVER, LLM_CHAT, LLM_ANSWER, TOOL, HTTP]


def target(text: str) -> SpanTarget:
    return SpanTarget.model_validate(yaml.safe_load(text))


def ids(*spans: Span) -> list[str]:
    return [one.span_id.hex() for one in spans]


def test_by_default_a_metric_scores_the_trace_and_selects_no_steps():
    default = SpanTarget()
    assert default.on == "trace" and not default.per_span
    with pytest.raises(ValueError, match="targets no steps"):
        default.select(trace_of(SPANS))
    assert not target("on: session").per_span


def test_a_bare_on_key_is_read_as_on_though_yaml_reads_it_as_true():
    assert yaml.safe_load("on: llm") == {True: "llm"}
    assert target("on: llm").on == "llm"


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("llm", [LLM_CHAT, LLM_ANSWER]), ("tool", [TOOL]), ("retrieval", [RETRIEVER])],
)
def test_each_step_kind_selects_its_steps_in_order(kind, expected):
    steps = target(f"on: {kind}").select(trace_of(SPANS))
    assert [step.span_id for step in steps] == ids(*expected)
    assert {step.kind for step in steps} == {kind}


def test_agent_spans_are_chosen_by_id_being_no_step():
    agent = target("on: agent")
    assert agent.span_ids(trace_of(SPANS)) == ids(AGENT)
    with pytest.raises(ValueError):
        agent.select(trace_of(SPANS))
    assert target("on: llm").span_ids(trace_of(SPANS)) == ids(LLM_CHAT, LLM_ANSWER)


def test_where_narrows_by_span_name_attribute_and_service():
    trace = trace_of(SPANS)
    by_name = target("{on: llm, where: {span_names: [answer]}}")
    assert [s.span_id for s in by_name.select(trace)] == ids(LLM_ANSWER)
    by_attribute = target("{on: llm, where: {attributes: [{key: llm.tier, value: small}]}}")
    assert [s.span_id for s in by_attribute.select(trace)] == ids(LLM_CHAT)
    by_regexp = target("{on: llm, where: {match_type: regexp, span_names: ['^(chat|answer)$']}}")
    assert len(by_regexp.select(trace)) == 2
    by_service = target("{on: llm, where: {services: [billing]}}")
    assert by_service.select(trace) == [] and len(by_service.select(trace_of(SPANS, service="billing"))) == 2
    # an attribute of the resource counts, as for score.include
    assert len(target("{on: llm, where: {attributes: [{key: service.name, value: shop}]}}").select(trace)) == 2


def test_where_and_sample_ratio_need_a_span_kind():
    for text in ("{where: {span_names: [a]}}", "{on: session, sample_ratio: 0.5}"):
        with pytest.raises(ValidationError, match="choose spans"):
            target(text)
    with pytest.raises(ValidationError):
        target("{on: llm, sample_ratio: 1.5}")
    with pytest.raises(ValidationError):
        target("{on: spans}")


def test_sampling_keeps_the_same_spans_on_every_run_and_the_share_asked():
    many = [AGENT, *(make_span(f"call{i}", {"openinference.span.kind": "LLM"}, parent=AGENT) for i in range(400))]
    half = target("{on: llm, sample_ratio: 0.5}")
    first = [step.span_id for step in half.select(trace_of(many))]
    assert first == [step.span_id for step in half.select(trace_of(many))]
    assert 150 < len(first) < 250
    expected = [one.span_id.hex() for one in many[1:] if span_sampled(TRACE_ID, one.span_id, 0.5)]
    assert first == expected
    assert target("{on: llm, sample_ratio: 0}").select(trace_of(many)) == []


def test_span_kinds_label_each_span_as_the_conventions_read_it():
    kinds = span_kinds(trace_of(SPANS), set(ids(*SPANS)))
    assert [kinds[span_id] for span_id in ids(*SPANS)] == ["agent", "retrieval", "llm", "llm", "tool", "span"]
