"""Which traces are scored: agent traces only by default, then `assembler.score`'s
include and exclude; everything else passes through the pipeline untouched."""

from __future__ import annotations

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.config.loader import parse_config
from spanscore.core.score_encoding import SESSION_SPAN_NAME
from spanscore.core.session import Session
from spanscore.pipeline.score_attributes import session_carrier
from tests.support.configs import MINIMAL, problems_of
from tests.support.recording_processor import RecordAgent, RecordAgentConfig
from tests.support.spans import AGENT_ROOT, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import toy


def copy_of(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    sent = ExportTraceServiceRequest()
    sent.CopyFrom(request)
    return sent


def one_span_trace(
    name: str = "root", attributes: dict | None = None, service: str = "agent", resource_attributes: dict | None = None
) -> tuple[bytes, ExportTraceServiceRequest]:
    trace_id = new_trace_id()
    return trace_id, request_of(
        [span(trace_id, name, attributes=attributes)], service=service, resource_attributes=resource_attributes
    )


def scored_trace_ids(rig) -> set[bytes]:
    return {e.trace_id for e in rig.exporter.exported if e.results}


# Agent traces only -----------------------------------------------------------------------


async def test_a_plain_http_trace_skips_the_processors_and_is_exported_as_received(rig_for):
    metric = toy()
    rig = await rig_for(metric)
    trace_id, root_id = new_trace_id(), new_span_id()
    request = request_of(
        [
            span(trace_id, "GET /orders", span_id=root_id, attributes={"http.request.method": "GET"}),
            span(trace_id, "SELECT orders", parent=root_id, attributes={"db.system": "postgresql"}),
        ],
        service="shop",
    )
    sent = copy_of(request)
    rig.receiver.send(request)
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert exported.results == () and exported.anchor_attributes == {"http.request.method": "GET"}
    assert exported.request.SerializeToString() == sent.SerializeToString()
    assert metric.seen == []
    assert (
        rig.pipeline.counts.unscored_traces,
        rig.pipeline.counts.exported_traces,
        rig.pipeline.counts.held_spans,
    ) == (1, 1, 0)


async def test_an_agent_trace_is_scored_with_the_view_built_once_for_scope_and_processors(rig_for, monkeypatch):
    from spanscore.processors.agent_trace import of_trace

    built, build = [], of_trace.build_agent_trace

    def counted_build(trace_id, spans, **options):
        built.append(trace_id)
        return build(trace_id, spans, **options)

    monkeypatch.setattr(of_trace, "build_agent_trace", counted_build)
    recorder, metric = RecordAgent("record_agent", RecordAgentConfig()), toy()
    rig = await rig_for(recorder, metric)
    trace_id, request = one_span_trace("invoke_agent", AGENT_ROOT)
    rig.receiver.send(request)
    await rig.at(1.0)
    assert rig.exporter.only(trace_id).scores == {"toy": 0.25}
    assert [seen[2] for seen in metric.seen] == [trace_id]
    assert [t.user_input for t in recorder.traces] == ["Where is my order?"]
    assert built == [trace_id]  # the scope's view is the one the processor read
    assert rig.pipeline.counts.unscored_traces == 0


async def test_agent_traces_only_false_scores_a_plain_trace(rig_for):
    rig = await rig_for(toy(), score={"agent_traces_only": False})
    trace_id, request = one_span_trace("GET /health")
    rig.receiver.send(request)
    await rig.at(1.0)
    assert rig.exporter.only(trace_id).scores == {"toy": 0.25}


async def test_a_non_agent_trace_neither_opens_nor_extends_a_session(rig_for):
    metric = toy()
    rig = await rig_for(metric, session_idle=60.0)
    agent_trace, agent_request = one_span_trace("turn", {**AGENT_ROOT, "session.id": "s1"})
    rig.receiver.send(agent_request)
    await rig.at(1.0)  # s1 opened, last active at 1.0
    rig.clock.now = 30.0
    http_in_s1, request = one_span_trace("GET /profile", {"session.id": "s1"})
    rig.receiver.send(request)
    http_in_s2, request = one_span_trace("GET /cart", {"session.id": "s2"})
    rig.receiver.send(request)
    await rig.at(31.0)
    assert list(rig.pipeline.sessions.open) == ["s1"]  # no s2
    await rig.at(61.0)  # 60 s after the agent trace: the plain one did not keep s1 open
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert carrier.anchor_attributes["eval.session.trace_count"] == 1
    assert [link.trace_id for link in carrier.anchor.links] == [agent_trace]
    assert carrier.scores == {"toy_session": 1.0}
    # The session id is still read and reported for the unscored traces.
    assert [rig.exporter.only(t).session_id for t in (http_in_s1, http_in_s2)] == ["s1", "s2"]
    assert [seen[2] for seen in metric.seen] == [agent_trace]


async def test_a_session_carrier_received_again_is_not_rescored(rig_for):
    # A chained collector or a replayed file sends spanscore's own carrier back; it is
    # recognized as OpenInference (kind EVALUATOR), yet is a report, not an agent's work.
    rig = await rig_for(toy(), score={"agent_traces_only": False})
    session = Session("s1", request_of([]).resource_spans[0].resource, 0.0)
    carrier = session_carrier(session, 1_000, 2_000, "1.0")
    request = ExportTraceServiceRequest(resource_spans=[carrier])
    sent = copy_of(request)
    rig.receiver.send(request)
    await rig.at(1.0)
    exported = rig.exporter.only(carrier.scope_spans[0].spans[0].trace_id)
    assert exported.results == () and exported.request.SerializeToString() == sent.SerializeToString()
    assert rig.pipeline.sessions.open == {} and rig.pipeline.counts.unscored_traces == 1


async def test_without_processors_the_normalized_view_is_never_built(rig_for, monkeypatch):
    from spanscore.pipeline import score_scope

    def fail(trace):
        raise AssertionError("normalized view built without processors")

    monkeypatch.setattr(score_scope, "agent_summary_of", fail)
    rig = await rig_for()
    trace_id, request = one_span_trace("GET /health")
    rig.receiver.send(request)
    await rig.at(1.0)
    assert rig.exporter.only(trace_id).results == ()
    assert rig.pipeline.counts.unscored_traces == 0  # not even considered: nothing to score with


# Include and exclude ---------------------------------------------------------------------


async def send_and_score(rig, *traces: tuple[bytes, ExportTraceServiceRequest]) -> set[bytes]:
    for _, request in traces:
        rig.receiver.send(request)
    await rig.at(1.0)
    return scored_trace_ids(rig)


async def test_include_by_service_scores_only_the_listed_services(rig_for):
    rig = await rig_for(toy(), score={"include": {"match_type": "strict", "services": ["billing-agent", "support"]}})
    billing = one_span_trace("a", AGENT_ROOT, service="billing-agent")
    support = one_span_trace("b", AGENT_ROOT, service="support")
    other = one_span_trace("c", AGENT_ROOT, service="billing-agent-canary")  # strict: whole name only
    assert await send_and_score(rig, billing, support, other) == {billing[0], support[0]}
    assert rig.pipeline.counts.unscored_traces == 1


async def test_exclude_by_service_regexp_is_unanchored_like_the_collectors(rig_for):
    rig = await rig_for(toy(), score={"exclude": {"match_type": "regexp", "services": ["canary"]}})
    canary = one_span_trace("a", AGENT_ROOT, service="billing-canary-2")
    stable = one_span_trace("b", AGENT_ROOT, service="billing")
    assert await send_and_score(rig, canary, stable) == {stable[0]}


async def test_include_by_attribute_matches_the_root_span_or_its_resource(rig_for):
    rig = await rig_for(toy(), score={"include": {"attributes": [{"key": "deployment.environment", "value": "prod"}]}})
    on_span = one_span_trace("a", {**AGENT_ROOT, "deployment.environment": "prod"})
    on_resource = one_span_trace("b", AGENT_ROOT, resource_attributes={"deployment.environment": "prod"})
    staging = one_span_trace("c", AGENT_ROOT, resource_attributes={"deployment.environment": "staging"})
    absent = one_span_trace("d", AGENT_ROOT)
    assert await send_and_score(rig, on_span, on_resource, staging, absent) == {on_span[0], on_resource[0]}


async def test_strict_attribute_values_match_with_their_type_and_a_bare_key_matches_presence(rig_for):
    rig = await rig_for(
        toy(),
        score={
            "exclude": {"attributes": [{"key": "replay", "value": True}]},
            "include": {"attributes": [{"key": "tenant"}]},
        },
    )
    replayed = one_span_trace("a", {**AGENT_ROOT, "tenant": "acme", "replay": True})
    string_true = one_span_trace("b", {**AGENT_ROOT, "tenant": "acme", "replay": "true"})  # not the boolean
    one = one_span_trace("c", {**AGENT_ROOT, "tenant": "acme", "replay": 1})  # nor is 1
    no_tenant = one_span_trace("d", AGENT_ROOT)
    assert await send_and_score(rig, replayed, string_true, one, no_tenant) == {string_true[0], one[0]}


async def test_every_attribute_and_property_of_a_filter_must_match(rig_for):
    rig = await rig_for(
        toy(),
        score={
            "exclude": {
                "match_type": "regexp",
                "span_names": ["^eval "],
                "attributes": [{"key": "user.id", "value": "^bot-"}],
            }
        },
    )
    bot_eval = one_span_trace("eval run 7", {**AGENT_ROOT, "user.id": "bot-17"})
    human_eval = one_span_trace("eval run 8", {**AGENT_ROOT, "user.id": "ana"})
    bot_chat = one_span_trace("chat", {**AGENT_ROOT, "user.id": "bot-17"})
    assert await send_and_score(rig, bot_eval, human_eval, bot_chat) == {human_eval[0], bot_chat[0]}


async def test_exclude_wins_over_include_and_agent_traces_only_still_applies(rig_for):
    rig = await rig_for(
        toy(),
        score={"include": {"services": ["shop"]}, "exclude": {"attributes": [{"key": "synthetic", "value": True}]}},
    )
    agent = one_span_trace("a", AGENT_ROOT, service="shop")
    synthetic = one_span_trace("b", {**AGENT_ROOT, "synthetic": True}, service="shop")
    plain = one_span_trace("c", {"http.request.method": "GET"}, service="shop")
    assert await send_and_score(rig, agent, synthetic, plain) == {agent[0]}


# Config ----------------------------------------------------------------------------------


def test_the_default_scope_is_agent_traces_only_without_filters():
    score = parse_config(MINIMAL, environ={}).pipeline_settings.score
    assert (score.agent_traces_only, score.include, score.exclude) == (True, None, None)


def test_scope_config_problems_are_named_by_key_path():
    problems = problems_of(
        MINIMAL
        + """
processors:
  assembler:
    score:
      agent_traces_only: maybe
      include: {match_type: regexp, services: ["agent-.*", "(unclosed"], attributes: [{key: env, value: 3}]}
      exclude: {match_type: strict}
"""
    )
    assert problems == [
        (
            "processors.assembler.score.agent_traces_only: Input should be a valid boolean, unable to interpret input "
            "(got 'maybe')"
        ),
        (
            "processors.assembler.score.include.services[1]: invalid regular expression: missing ), unterminated "
            "subpattern at position 0 (got '(unclosed')"
        ),
        (
            "processors.assembler.score.include.attributes[0].value: must be a string (a regular expression) with "
            "match_type regexp (got 3)"
        ),
        "processors.assembler.score.exclude: give at least one of services, span_names, attributes",
    ]


@pytest.mark.parametrize(
    "settings,problem",
    [
        (
            "{include: {match_type: glob, services: [a]}}",
            "processors.assembler.score.include.match_type: Input should be 'strict' or 'regexp' (got 'glob')",
        ),
        (
            "{exclude: {resources: [{key: a}], services: [a]}}",
            "processors.assembler.score.exclude.resources: unknown key",
        ),
        (
            "{include: {attributes: [{value: x}]}}",
            "processors.assembler.score.include.attributes[0].key: Field required",
        ),
    ],
)
def test_scope_config_rejects_unknown_match_types_and_keys(settings, problem):
    assert problems_of(MINIMAL + f"processors: {{assembler: {{score: {settings}}}}}\n") == [problem]
