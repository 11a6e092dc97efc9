"""The score writer: what it prepares as bytes is what writing in place writes, so a
trace scored in a worker and one scored in the collector carry the same spans."""

from __future__ import annotations

import logging

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import PREVIOUS_CARRIER_LINK
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.score_writer import ScoreWriter
from spanscore.pipeline.scoring import Scored, sequence_attributes
from tests.support.spans import assert_rescored, evaluation_events, kv, new_span_id, new_trace_id, scored_before, span

PROVENANCE = {"toy": Provenance("spanscore/toy", "abc123"), "loops": Provenance("spanscore/loops", "def456")}
WRITER = ScoreWriter(PROVENANCE, span_events=True, score_labels=frozenset({"eval.toy.tier"}))
TRACE_ID, ROOT_ID, TOOL_ID = new_trace_id(), new_span_id(), new_span_id()
SPANS = [span(TRACE_ID, "agent", span_id=ROOT_ID), span(TRACE_ID, "tool", parent=ROOT_ID, span_id=TOOL_ID)]


def trace_of(spans: list[Span]) -> Trace:
    """A fresh trace of copies of `spans`, from service `agent`."""
    resource_spans = ResourceSpans(resource=Resource(attributes=[kv("service.name", "agent")]))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.spans.extend(spans)
    trace = Trace(spans[0].trace_id if spans else TRACE_ID, 0.0)
    origin = ScopeOrigin(resource_spans, scope_spans)
    for position, one in enumerate(scope_spans.spans):
        trace.add(position, one, origin)
    return trace


def everything() -> Scored:
    return Scored(
        results=[
            MetricResult(name="toy", score=0.5, explanation="2 spans"),
            MetricResult.failure("loops", RuntimeError("judge down")),
        ],
        usages=[EvaluatorUsage("judge", 1, 100, 10), EvaluatorUsage("judge", 2, 50, 5)],
        attributes=[SpanAttribute("eval.toy.tier", "gold"), SpanAttribute("eval.toy.tier", "silver")],
        findings=[
            SpanFinding(TOOL_ID, "loops", "fail", "the tool was called in a loop"),
            SpanFinding(b"\x01" * 8, "loops", "fail", "about a span the trace does not have"),
        ],
    )


def written(trace: Trace) -> list[Span]:
    """Its spans with the events' times left out: the two ways write at different instants."""
    spans = [Span.FromString(one.SerializeToString()) for one, _ in trace.spans()]
    for one in spans:
        for event in one.events:
            event.time_unix_nano = 0
    return spans


def merged(trace: Trace, scored: Scored, observations: ScoreObservations | None = None) -> Trace:
    prepared = WRITER.prepare_trace(trace, scored, observations)
    assert prepared is not None and prepared.anchor_span_id == ROOT_ID
    spans = {one.span_id: one for one, _ in trace.spans()}
    spans[prepared.anchor_span_id].MergeFromString(prepared.anchor)
    for span_id, fields in prepared.span_fields:
        spans[span_id].MergeFromString(fields)
    return trace


def test_prepared_bytes_merged_are_what_writing_in_place_writes():
    in_place = trace_of(SPANS)
    WRITER.write_in_place(in_place, everything())
    assert written(merged(trace_of(SPANS), everything())) == written(in_place)
    root, tool = written(in_place)
    attributes = attributes_to_dict(root.attributes)
    assert attributes["eval.toy.score"] == 0.5 and attributes["eval.toy.evaluator"] == "spanscore/toy"
    assert attributes["eval.loops.error"] == "judge down"
    assert attributes["eval.judge.calls"] == 3 and attributes["eval.judge.input_tokens"] == 150
    assert attributes["eval.toy.tier"] == "silver"  # the last of a repeated key
    assert [e["gen_ai.evaluation.name"] for e in evaluation_events(root)] == ["toy", "loops", "loops"]
    assert [e["gen_ai.evaluation.explanation"] for e in evaluation_events(tool)] == ["the tool was called in a loop"]


def test_without_span_events_only_attributes_are_written():
    writer = ScoreWriter(PROVENANCE, span_events=False)
    trace = trace_of(SPANS)
    prepared = writer.prepare_trace(trace, everything())
    assert prepared.span_fields == ()
    trace.anchor.MergeFromString(prepared.anchor)
    assert not trace.anchor.events and attributes_to_dict(trace.anchor.attributes)["eval.toy.score"] == 0.5


def test_an_anchor_scored_before_is_left_to_writing_in_place_which_replaces_its_results():
    trace = trace_of([scored_before(TRACE_ID, "agent", span_id=ROOT_ID)])
    observations = ScoreObservations()
    results = [MetricResult(name="toy", score=0.25, explanation="1 spans")]
    scored = Scored(results=results, attributes=sequence_attributes(results, 1))  # as scoring adds them
    assert ScoreWriter().prepare_trace(trace, scored, observations) is None
    assert not observations  # the caller observes what it writes in place
    ScoreWriter().write_in_place(trace, scored)
    assert_rescored(trace.anchor, 1)


def test_what_is_prepared_is_observed_once():
    observations, expected = ScoreObservations(), ScoreObservations()
    trace = trace_of(SPANS)
    merged(trace, everything(), observations)
    WRITER.observe_trace(expected, trace, everything())
    assert observations.counts == expected.counts and observations.scores.keys() == expected.scores.keys()
    assert observations.counts  # results, calls, tokens and the tool's failure were counted


def test_a_trace_without_spans_has_nothing_prepared():
    observations = ScoreObservations()
    assert WRITER.prepare_trace(trace_of([]), everything(), observations) is None
    assert not observations


def test_a_session_carrier_links_its_traces_and_is_observed():
    resource = Resource(attributes=[kv("service.name", "agent")])
    links = [(new_trace_id(), new_span_id()), (new_trace_id(), None)]
    results = [MetricResult(name="toy", score=1.0)]
    observations = ScoreObservations()
    carrier = WRITER.carrier("session-1", resource, links, results, Scored(), 1_000, observations)
    [carried] = carrier.scope_spans[0].spans
    assert carrier.resource == resource and [(link.trace_id, link.span_id) for link in carried.links] == links[:1]
    attributes = attributes_to_dict(carried.attributes)
    assert attributes["session.id"] == "session-1" and attributes["eval.session.trace_count"] == 2
    assert attributes["eval.toy.score"] == 1.0 and carried.start_time_unix_nano == 1_000
    assert observations


def test_a_session_scored_again_is_observed_as_re_scores_and_links_its_previous_carrier():
    resource = Resource(attributes=[kv("service.name", "agent")])
    links = [(new_trace_id(), new_span_id())]
    previous = (new_trace_id(), new_span_id())
    results = [MetricResult(name="toy", score=1.0), MetricResult(name="loops", score=0.0)]
    usage = EvaluatorUsage(evaluator="judge", calls=2, input_tokens=10, output_tokens=3)
    observations = ScoreObservations()
    carrier = WRITER.carrier(
        "session-1", resource, links, results, Scored(usages=[usage]), 0, observations, previous, rescore=True
    )
    [carried] = carrier.scope_spans[0].spans
    assert [(link.trace_id, link.span_id) for link in carried.links] == [*links, previous]
    assert [kv.key for kv in carried.links[1].attributes] == [PREVIOUS_CARRIER_LINK]
    assert attributes_to_dict(carried.attributes)["eval.session.trace_count"] == 1  # the previous carrier is no trace
    kinds = sorted((kind, amount) for (kind, _, _), amount in observations.counts.items())
    # One re-score per result, no result counted again, no score observed; the judge's calls and tokens are.
    assert kinds == [("calls", 2), ("rescores", 1), ("rescores", 1), ("tokens", 3), ("tokens", 10)]
    assert not observations.scores


def test_a_session_without_results_or_attributes_has_no_carrier():
    observations = ScoreObservations()
    assert WRITER.carrier("session-1", Resource(), [], [], Scored(), 0, observations) is None
    assert not observations
    skipped = Scored(attributes=[SpanAttribute("eval.toy.skipped", "cut off")])
    assert WRITER.carrier("session-1", Resource(), [], [], skipped, 0) is not None


LLM_ID = new_span_id()
THREE = [*SPANS, span(TRACE_ID, "chat", parent=ROOT_ID, span_id=LLM_ID)]


def on_spans(trace: Trace, *scores: tuple[bytes, float]) -> Scored:
    """`loops` scored on the given spans, beside the trace-level `toy`, sorted as scoring sorts them."""
    scored = Scored(
        results=[
            MetricResult(name="toy", score=0.5),
            *(MetricResult(name="loops", score=score, span_id=span_id.hex()) for span_id, score in scores),
        ]
    )
    scored.sort_spans(trace)
    return scored


def test_span_level_results_go_on_their_spans_and_roll_up_on_the_root_both_ways():
    in_place = trace_of(THREE)
    WRITER.write_in_place(in_place, on_spans(in_place, (TOOL_ID, 0.25), (LLM_ID, 0.75)))
    prepared = trace_of(THREE)
    assert written(merged(prepared, on_spans(prepared, (TOOL_ID, 0.25), (LLM_ID, 0.75)))) == written(in_place)
    root, tool, llm = written(in_place)
    on_tool = attributes_to_dict(tool.attributes)
    assert on_tool["eval.loops.score"] == 0.25 and on_tool["eval.loops.label"] == "fail"
    assert attributes_to_dict(llm.attributes)["eval.loops.label"] == "pass"
    assert attributes_to_dict(llm.attributes)["eval.loops.evaluator"] == "spanscore/loops"
    assert [e["gen_ai.evaluation.score.value"] for e in evaluation_events(tool)] == [0.25]
    assert [e["gen_ai.evaluation.score.value"] for e in evaluation_events(llm)] == [0.75]
    on_root = attributes_to_dict(root.attributes)
    assert on_root["eval.loops.spans"] == 2 and on_root["eval.loops.failing"] == 1
    assert on_root["eval.loops.min"] == 0.25 and on_root["eval.loops.mean"] == 0.5
    assert on_root["eval.loops.score"] == 0.25 and on_root["eval.loops.label"] == "fail"
    assert on_root["eval.toy.score"] == 0.5
    assert [e["gen_ai.evaluation.name"] for e in evaluation_events(root)] == ["toy", "loops"]


def test_scored_again_a_metric_is_on_the_spans_it_names_now_and_nowhere_else():
    trace = trace_of(THREE)
    WRITER.write_in_place(trace, on_spans(trace, (TOOL_ID, 0.25), (LLM_ID, 0.75)))
    again = on_spans(trace, (LLM_ID, 1.0))
    assert WRITER.prepare_trace(trace, again) is None  # its root has the roll-up already
    WRITER.write_in_place(trace, again)
    root, tool, llm = written(trace)
    assert not any(kv.key.startswith("eval.loops.") for kv in tool.attributes) and not evaluation_events(tool)
    assert attributes_to_dict(llm.attributes)["eval.loops.score"] == 1.0
    assert [e["gen_ai.evaluation.score.value"] for e in evaluation_events(llm)] == [1.0]
    on_root = attributes_to_dict(root.attributes)
    assert on_root["eval.loops.spans"] == 1 and on_root["eval.loops.failing"] == 0
    assert on_root["eval.loops.label"] == "pass"
    assert [e["gen_ai.evaluation.name"] for e in evaluation_events(root)] == ["toy", "loops"]


def test_a_span_scored_before_is_left_to_writing_in_place():
    trace = trace_of(THREE)
    WRITER.write_in_place(trace, on_spans(trace, (TOOL_ID, 0.25)))
    trace.anchor.ClearField("attributes")  # only the tool span says it was scored
    trace.anchor.ClearField("events")
    assert WRITER.prepare_trace(trace, on_spans(trace, (TOOL_ID, 0.5))) is None


def test_a_result_naming_a_span_the_trace_lacks_is_an_error_on_the_root():
    trace = trace_of(THREE)
    WRITER.write_in_place(trace, on_spans(trace, (TOOL_ID, 0.25), (b"\x07" * 8, 0.5)))
    root, tool, llm = written(trace)
    on_root = attributes_to_dict(root.attributes)
    assert on_root["eval.loops.error"] == (
        "1 of its 2 span-level results name spans not in the trace: 0707070707070707"
    )
    assert "eval.loops.score" not in on_root
    assert attributes_to_dict(tool.attributes)["eval.loops.score"] == 0.25  # the one it has is written


def test_span_level_results_are_observed_with_their_span_kind():
    observations = ScoreObservations()
    trace = trace_of(THREE)
    merged(trace, on_spans(trace, (TOOL_ID, 0.25), (LLM_ID, 0.75)), observations)
    series = {dict(key[2]).get("eval.span.kind") for key in observations.counts if key[0] == "results"}
    assert series == {None, "span"}  # the trace's (toy, the roll-up) unlabelled; these spans are read as no kind


def with_context(trace: Trace | None, *categories: tuple[bytes, str]) -> Scored:
    """`loops` scored on the given spans with its category beside each result, and one
    attribute for the trace's anchor, sorted as scoring sorts them."""
    scored = Scored(attributes=[SpanAttribute("eval.toy.tier", "gold")])
    for span_id, category in categories:
        scored.results.append(MetricResult(name="loops", score=float(category == "none"), span_id=span_id.hex()))
        scored.attributes.append(SpanAttribute("eval.loops.category", category, span_id.hex()))
    scored.sort_spans(trace)
    return scored


def test_an_attribute_naming_a_span_goes_on_that_span_both_ways():
    in_place = trace_of(THREE)
    WRITER.write_in_place(in_place, with_context(in_place, (TOOL_ID, "repeated"), (LLM_ID, "none")))
    prepared = trace_of(THREE)
    assert written(merged(prepared, with_context(prepared, (TOOL_ID, "repeated"), (LLM_ID, "none")))) == written(
        in_place
    )
    root, tool, llm = written(in_place)
    on_tool, on_llm, on_root = (attributes_to_dict(one.attributes) for one in (tool, llm, root))
    assert (on_tool["eval.loops.category"], on_tool["eval.loops.score"]) == ("repeated", 0.0)
    assert (on_llm["eval.loops.category"], on_llm["eval.loops.score"]) == ("none", 1.0)
    assert on_root["eval.toy.tier"] == "gold" and on_root["eval.loops.spans"] == 2
    assert "eval.loops.category" not in on_root


def test_scored_again_a_span_keeps_only_the_attributes_of_now():
    trace = trace_of(THREE)
    WRITER.write_in_place(trace, with_context(trace, (TOOL_ID, "repeated"), (LLM_ID, "none")))
    WRITER.write_in_place(trace, with_context(trace, (LLM_ID, "repeated")))
    _, tool, llm = written(trace)
    assert not any(kv.key.startswith("eval.loops.") for kv in tool.attributes)
    on_llm = attributes_to_dict(llm.attributes)
    assert (on_llm["eval.loops.category"], on_llm["eval.loops.score"]) == ("repeated", 0.0)
    assert sum(kv.key == "eval.loops.category" for kv in llm.attributes) == 1


def test_an_attribute_naming_a_span_the_trace_lacks_is_dropped_with_a_debug_log(caplog):
    trace = trace_of(THREE)
    scored = Scored(
        results=[MetricResult(name="loops", score=1.0, span_id=TOOL_ID.hex())],
        attributes=[
            SpanAttribute("eval.loops.category", "none", TOOL_ID.hex()),
            SpanAttribute("eval.loops.raw_score", 3.0, "07" * 8),
        ],
    )
    with caplog.at_level(logging.DEBUG, logger="spanscore.span_rollup"):
        scored.sort_spans(trace)
    assert [a.key for a in scored.span_attributes] == ["eval.loops.category"]
    assert "eval.loops.raw_score dropped: it names span 0707070707070707, not in the trace" in caplog.text
    assert all(record.levelno == logging.DEBUG for record in caplog.records)
    WRITER.write_in_place(trace, scored)
    root, tool, llm = written(trace)
    assert attributes_to_dict(tool.attributes)["eval.loops.category"] == "none"
    assert attributes_to_dict(root.attributes)["eval.loops.label"] == "pass"  # no error for the roll-up
    assert not any(kv.key == "eval.loops.raw_score" for one in (root, tool, llm) for kv in one.attributes)


def test_an_attribute_naming_a_span_has_no_place_on_a_session_s_carrier():
    scored = Scored(
        results=[MetricResult(name="toy", score=0.5)],
        attributes=[SpanAttribute("eval.toy.tier", "gold"), SpanAttribute("eval.toy.category", "x", TOOL_ID.hex())],
    )
    scored.sort_spans(None)
    assert scored.span_attributes == [] and [a.key for a in scored.attributes] == ["eval.toy.tier"]
    carrier = WRITER.carrier("session-1", Resource(), [], scored.results, scored, 0)
    assert carrier is not None
    on_carrier = attributes_to_dict(carrier.scope_spans[0].spans[0].attributes)
    assert on_carrier["eval.toy.tier"] == "gold" and "eval.toy.category" not in on_carrier
