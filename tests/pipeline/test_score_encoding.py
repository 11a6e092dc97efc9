"""The score encoding contract, read back from spans exported over OTLP."""

from __future__ import annotations

import pytest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.pipeline.score_attributes import attach_results, carrier_spans, carry_over
from tests.support.otlp_client import send
from tests.support.running import sink_config, wait_until
from tests.support.spans import (
    AGENT_ROOT,
    assert_rescored,
    evaluation_events,
    exported_span,
    new_span_id,
    new_trace_id,
    request_of,
    scored_before,
    span,
)
from tests.support.toy_metric import TOY


@pytest.fixture
def scored(sink, start_collector):
    return start_collector(sink_config(sink, processors="[assembler, toy_metric]", extra_processors=TOY))


def test_scores_land_on_the_root_span_as_attributes_and_events(scored, sink):
    trace_id, root_id = new_trace_id(), new_span_id()
    send(
        scored.grpc_port,
        request_of(
            [
                span(trace_id, "agent", span_id=root_id, attributes=AGENT_ROOT),
                span(trace_id, "llm", parent=root_id),
                span(trace_id, "tool", parent=root_id),
            ]
        ),
    )
    assert wait_until(lambda: len(sink.spans()) == 3)
    root = exported_span(sink, "agent")
    attributes = attributes_to_dict(root.attributes)
    assert attributes["eval.toy.score"] == 0.75
    assert [a.value.WhichOneof("value") for a in root.attributes if a.key == "eval.toy.score"] == ["double_value"]
    assert attributes["eval.toy.label"] == "pass"
    assert attributes["eval.toy.explanation"] == "3 spans"
    assert "eval.toy.error" not in attributes
    assert evaluation_events(root) == [
        {
            "gen_ai.evaluation.name": "toy",
            "eval.evaluator": "code",
            "eval.revision": CODE_PROVENANCE.revision,
            "gen_ai.evaluation.score.value": 0.75,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.explanation": "3 spans",
        }
    ]
    for name in ("llm", "tool"):
        child = exported_span(sink, name)
        assert not [a for a in child.attributes if a.key.startswith("eval.")] and not child.events


def test_label_is_fail_below_threshold(scored, sink):
    send(scored.grpc_port, request_of([span(new_trace_id(), "lonely agent", attributes=AGENT_ROOT)]))
    assert wait_until(lambda: len(sink.spans()) == 1)
    attributes = attributes_to_dict(exported_span(sink, "lonely agent").attributes)
    assert (attributes["eval.toy.score"], attributes["eval.toy.label"]) == (0.25, "fail")


def test_a_failing_metric_records_an_error_and_the_trace_is_still_exported(scored, sink):
    trace_id, root_id = new_trace_id(), new_span_id()
    send(
        scored.grpc_port,
        request_of(
            [span(trace_id, "broken", span_id=root_id, attributes=AGENT_ROOT), span(trace_id, "llm", parent=root_id)]
        ),
    )
    assert wait_until(lambda: len(sink.spans()) == 2)
    root = exported_span(sink, "broken")
    attributes = attributes_to_dict(root.attributes)
    assert attributes["eval.toy.error"] == "cannot score broken"
    assert "eval.toy.score" not in attributes and "eval.toy.label" not in attributes
    assert evaluation_events(root) == [
        {
            "gen_ai.evaluation.name": "toy",
            "eval.evaluator": "code",
            "eval.revision": CODE_PROVENANCE.revision,
            "gen_ai.evaluation.explanation": "cannot score broken",
            "error.type": "RuntimeError",
        }
    ]


def test_incomplete_trace_scores_go_on_its_earliest_span(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, toy_metric]",
            extra_processors=TOY,
            assembler="trace_wait: 50ms, trace_timeout: 300ms",
        )
    )
    trace_id, missing_root = new_trace_id(), new_span_id()
    send(
        collector.grpc_port,
        request_of(
            [
                span(trace_id, "second", parent=missing_root, start_ns=2_000),
                span(trace_id, "first", parent=missing_root, start_ns=1_000, attributes=AGENT_ROOT),
            ]
        ),
    )
    assert wait_until(lambda: len(sink.spans()) == 2)
    assert attributes_to_dict(exported_span(sink, "first").attributes)["eval.toy.score"] == 0.5
    assert not evaluation_events(exported_span(sink, "second"))


def test_scoring_a_span_again_replaces_the_metrics_attributes_and_events():
    root = span(new_trace_id(), "agent", attributes={"eval.case.id": "c1", "eval.other.score": 0.4})
    older, newer = Provenance("judge-a", "aaaaaaaaaaaa"), Provenance("judge-b", "bbbbbbbbbbbb")
    attach_results(root, [MetricResult(name="m", score=0.2, explanation="first")], provenance={"m": older})
    attach_results(root, [MetricResult(name="m", score=0.9)], provenance={"m": newer})
    keys = [a.key for a in root.attributes]
    assert len(keys) == len(set(keys))
    assert attributes_to_dict(root.attributes) == {
        "eval.case.id": "c1",
        "eval.other.score": 0.4,
        "eval.m.evaluator": "judge-b",
        "eval.m.revision": "bbbbbbbbbbbb",
        "eval.m.score": 0.9,
        "eval.m.label": "pass",  # and no explanation: the first scoring's is gone with it
    }
    assert evaluation_events(root) == [
        {
            "gen_ai.evaluation.name": "m",
            "eval.evaluator": "judge-b",
            "eval.revision": "bbbbbbbbbbbb",
            "gen_ai.evaluation.score.value": 0.9,
            "gen_ai.evaluation.score.label": "pass",
        }
    ]


def test_a_trace_that_arrives_scored_has_its_results_replaced_not_doubled(scored, sink):
    # A second spanscore downstream of another: the root carries the first one's results.
    trace_id = new_trace_id()
    send(scored.grpc_port, request_of([scored_before(trace_id, "agent")]))
    assert wait_until(lambda: len(sink.spans()) == 1)
    root = exported_span(sink, "agent")
    assert_rescored(root, span_count=1)


def test_metric_result_rejects_scores_outside_the_unit_interval():
    with pytest.raises(ValueError, match="within"):
        MetricResult(name="m", score=7.5)
    with pytest.raises(ValueError):
        MetricResult(name="m", score=float("nan"))
    assert MetricResult(name="m", score=0.5).label == "pass"
    assert MetricResult(name="m", score=0.49).passed is False


def test_a_new_carrier_keeps_the_earlier_carriers_results_of_metrics_it_has_none_of():
    def carrier(results, attributes=(), provenance=None):
        built = carrier_spans("s", Resource(), [], results, 1, 2, "0", provenance, True, attributes)
        return built.scope_spans[0].spans[0]

    old = {"kept": Provenance("old-judge", "000000000000"), "rescored": Provenance("old-judge", "000000000000")}
    earlier = carrier(
        [MetricResult(name="kept", score=0.3), MetricResult(name="rescored", score=0.1)],
        [SpanAttribute("eval.kept.skipped", "an older skip")],
        old,
    )
    # Now: `rescored` has a new result, `kept` is skipped (the judge's budget spent).
    new = carrier([MetricResult(name="rescored", score=0.9)], [SpanAttribute("eval.kept.skipped", "budget spent")])
    carry_over(new, [earlier])
    keys = [a.key for a in new.attributes]
    assert len(keys) == len(set(keys))
    attributes = attributes_to_dict(new.attributes)
    assert (attributes["eval.rescored.score"], attributes["eval.rescored.evaluator"]) == (0.9, "code")
    assert (attributes["eval.kept.score"], attributes["eval.kept.evaluator"]) == (0.3, "old-judge")
    assert attributes["eval.kept.skipped"] == "budget spent"
    assert [(e["gen_ai.evaluation.name"], e["eval.evaluator"]) for e in evaluation_events(new)] == [
        ("rescored", "code"),
        ("kept", "old-judge"),
    ]
