"""The pipeline between an in-memory receiver and in-memory exporters, on a hand-held clock.

No sockets: requests go in through `MemoryReceiver`, traces come out in `MemoryExporter`,
and time moves only when a test sets the clock and ticks the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from spanscore.core.consumer import ConsumerFull
from spanscore.core.evaluation_event import EVALUATION_EVENT
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import SESSION_SPAN_NAME
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.usage import EvaluatorUsage
from spanscore.exporters.memory import MemoryExporter
from spanscore.processors.base import Processor
from spanscore.receivers.ingest import InvalidRequest
from spanscore.receivers.memory import MemoryReceiver
from tests.support.spans import AGENT_ROOT, assert_forwarded_faithfully, new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import toy

# These tests are about the pipeline's mechanics on hand-made spans that are no agent's:
# they score every trace rather than agent traces only (the scope has tests of its own).
EVERY_TRACE = {"agent_traces_only": False}


class UsageReporter(Processor):
    """Scores every trace 0.75 and reports what a judge would have spent on it."""

    metric_names = ("judged",)

    async def process_trace(self, trace, session):
        return [
            MetricResult(name="judged", score=0.75),
            EvaluatorUsage(evaluator="judge", calls=2, input_tokens=120, output_tokens=30),
        ]


class CaseTagger(Processor):
    """Tags each trace, and each session's carrier, with the case it was graded against."""

    metric_names = ("graded",)

    async def process_trace(self, trace, session):
        return [MetricResult(name="graded", score=1.0), SpanAttribute("eval.case.id", "oslo-weather")]

    async def process_session(self, session):
        return [
            MetricResult(name="graded_session", score=0.5),
            SpanAttribute("eval.case.id", "oslo-weather"),
            SpanAttribute("eval.attempt.turns", len(session.traces)),
        ]


class ModelJudged(Processor):
    """Scores every trace as a judge model would, under a rubric revision of its own."""

    metric_names = ("judged",)

    def provenance(self, metric_name):
        return Provenance("gpt-test", "rubric-7")

    async def process_trace(self, trace, session):
        return [MetricResult(name="judged", score=0.75)]


def by_code(metric: str) -> dict[str, str]:
    """The provenance attributes of a metric computed by code."""
    return {f"eval.{metric}.evaluator": "code", f"eval.{metric}.revision": CODE_PROVENANCE.revision}


def evaluation_events(exported) -> list[dict]:
    return [
        {kv.key: kv.value for kv in event.attributes}
        for event in exported.anchor.events
        if event.name == EVALUATION_EVENT
    ]


# Readiness -------------------------------------------------------------------------------


async def test_trace_is_exported_once_quiet_for_trace_wait_after_its_root_arrived(rig_for):
    rig = await rig_for(toy(), score=EVERY_TRACE)
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "child", parent=root_id)]))
    await rig.at(1.5)
    assert rig.exporter.exported == []  # quiet, but no root yet
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    await rig.at(2.25)
    assert rig.exporter.exported == []
    await rig.at(2.5)
    exported = rig.exporter.only(trace_id)
    assert exported.complete and not exported.late
    assert sorted(exported.span_names) == ["child", "root"]
    assert exported.anchor.name == "root"
    assert exported.anchor_attributes == {
        "eval.toy.score": 0.5,
        "eval.toy.label": "pass",
        "eval.toy.explanation": "2 spans",
        "eval.toy.sequence": 1,  # the trace's first scoring
        **by_code("toy"),
    }
    assert rig.pipeline.counts.held_spans == 0 and rig.pipeline.counts.exported_traces == 1


async def test_trace_without_root_is_exported_at_trace_timeout_marked_incomplete(rig_for):
    rig = await rig_for(toy(), trace_timeout=5.0, score=EVERY_TRACE)
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "orphan", parent=new_span_id())]))
    await rig.at(4.75)
    assert rig.exporter.exported == []
    await rig.at(5.0)
    exported = rig.exporter.only(trace_id)
    assert not exported.complete
    assert exported.anchor.name == "orphan"  # scores go on the earliest span instead
    assert exported.anchor_attributes["eval.toy.score"] == 0.25
    assert exported.anchor_attributes["eval.toy.label"] == "fail"


async def test_without_processors_traces_are_forwarded_unchanged(rig_for):
    rig = await rig_for()
    trace_id, root_id = new_trace_id(), new_span_id()
    request = request_of(
        [span(trace_id, "root", span_id=root_id), span(trace_id, "child", parent=root_id)],
        service="shop",
        resource_attributes={"deployment.environment": "test"},
    )
    sent = type(request)()
    sent.CopyFrom(request)
    rig.receiver.send(request)
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert exported.results == () and exported.scores == {}
    assert_forwarded_faithfully([sent], [exported.request])


# Sessions --------------------------------------------------------------------------------


async def test_traces_of_one_session_reach_processors_in_the_order_they_became_ready(rig_for):
    metric = toy(delay_s=0.01)  # scoring overlaps unless the session keeps it in order
    rig = await rig_for(metric, score=EVERY_TRACE)
    first, second, third, other = (new_trace_id() for _ in range(4))
    first_root = new_span_id()
    rig.receiver.send(request_of([span(first, "first", span_id=first_root, attributes={"session.id": "s1"})]))
    rig.clock.now = 0.25
    rig.receiver.send(
        request_of(
            [
                span(second, "second", attributes={"session.id": "s1"}),
                span(other, "other", attributes={"session.id": "s2"}),
            ]
        )
    )
    rig.clock.now = 0.5
    rig.receiver.send(request_of([span(first, "step", parent=first_root)]))  # `first` becomes ready last
    await rig.at(1.25)
    rig.receiver.send(request_of([span(third, "third", attributes={"session.id": "s1"})]))
    await rig.at(3.0)
    assert [seen for seen in metric.seen if seen[0] == "s1"] == [("s1", 0, second), ("s1", 1, first), ("s1", 2, third)]
    assert [seen for seen in metric.seen if seen[0] == "s2"] == [("s2", 0, other)]
    assert [rig.exporter.only(t).session_id for t in (first, second, third, other)] == ["s1", "s1", "s1", "s2"]


async def test_idle_session_closes_and_exports_a_carrier_linked_to_its_root_spans(rig_for):
    rig = await rig_for(toy(), session_idle=60.0, score=EVERY_TRACE)
    traces = [(new_trace_id(), new_span_id()) for _ in range(2)]
    rig.receiver.send(
        request_of([span(t, "turn", span_id=s, attributes={"session.id": "s1"}) for t, s in traces], service="chat")
    )
    await rig.at(1.0)  # both released, so the session was last active at 1.0
    await rig.at(60.75)
    assert rig.exporter.named(SESSION_SPAN_NAME) == []
    assert list(rig.pipeline.sessions.open) == ["s1"]
    await rig.at(61.0)
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert rig.pipeline.sessions.open == {}
    assert carrier.session_id == "s1" and carrier.scores == {"toy_session": 1.0}
    assert carrier.anchor_attributes == {
        "session.id": "s1",
        "gen_ai.conversation.id": "s1",
        "openinference.span.kind": "EVALUATOR",
        "eval.session.trace_count": 2,
        "eval.toy_session.score": 1.0,
        "eval.toy_session.label": "pass",
        "eval.toy_session.explanation": "2 of 2 traces complete",
        "eval.toy_session.sequence": 1,
        **by_code("toy_session"),
    }
    assert {(link.trace_id, link.span_id) for link in carrier.anchor.links} == set(traces)
    [resource_spans] = carrier.request.resource_spans
    assert resource_spans.resource.attributes[0].value.string_value == "chat"
    assert rig.pipeline.counts.held_spans == 0 and rig.pipeline.counts.exported_traces == 3


async def test_drain_closes_open_sessions_and_exports_their_carriers(rig_for):
    rig = await rig_for(toy(), score=EVERY_TRACE)
    complete, rootless = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([span(complete, "turn", attributes={"session.id": "s1"})]))
    await rig.at(1.0)
    rig.receiver.send(request_of([span(rootless, "orphan", parent=new_span_id(), attributes={"session.id": "s1"})]))
    await rig.drain()
    assert not rig.exporter.only(rootless).complete  # released by the drain, still scored
    assert rig.exporter.only(rootless).scores == {"toy": 0.25}
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert carrier.scores == {"toy_session": 0.5}
    assert carrier.anchor_attributes["eval.session.trace_count"] == 2
    assert {link.trace_id for link in carrier.anchor.links} == {complete, rootless}
    assert rig.pipeline.sessions.open == {} and rig.pipeline.counts.held_spans == 0


async def test_sessions_are_not_kept_when_no_processor_reads_them(rig_for):
    rig = await rig_for(UsageReporter(), score=EVERY_TRACE)
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "turn", attributes={"session.id": "s1"})]))
    await rig.at(1.0)
    assert rig.pipeline.sessions.open == {}
    assert rig.exporter.only(trace_id).session_id == "s1"
    await rig.drain()
    assert rig.exporter.named(SESSION_SPAN_NAME) == []


# Late spans and shutdown -----------------------------------------------------------------

# The same behaviour, scored in the collector's process or in a scoring worker process.
SCORED_HERE_OR_IN_A_WORKER = pytest.mark.parametrize("workers", [0, 1], ids=["in_process", "scoring_workers"])


async def test_late_spans_of_a_forwarded_trace_are_exported_unscored_after_trace_wait(rig_for):
    metric = toy()
    rig = await rig_for(metric, score=EVERY_TRACE, late_spans="forward")
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    await rig.at(1.0)
    rig.clock.now = 5.0
    rig.receiver.send(request_of([span(trace_id, "straggler", parent=root_id)]))
    await rig.at(5.75)
    assert len(rig.exporter.by_trace_id(trace_id)) == 1
    await rig.at(6.0)
    scored, late = rig.exporter.by_trace_id(trace_id)
    assert (scored.late, scored.scores) == (False, {"toy": 0.25})
    assert late.late and late.span_names == ["straggler"] and late.results == ()
    assert not any(key.startswith("eval.") for key in late.anchor_attributes)
    assert [seen[2] for seen in metric.seen] == [trace_id]  # scored once


@SCORED_HERE_OR_IN_A_WORKER
async def test_late_spans_rescore_their_trace_onto_a_carrier_sending_no_span_twice(rig_for, workers):
    metric = toy()
    rig = await rig_for(metric, score=EVERY_TRACE, scoring_workers=workers)
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    await rig.at(1.0)
    rig.clock.now = 5.0
    rig.receiver.send(request_of([span(trace_id, "tool", parent=root_id), span(trace_id, "llm", parent=root_id)]))
    await rig.at(6.0)
    scored, late, carrier = rig.exporter.by_trace_id(trace_id)
    assert scored.anchor_attributes["eval.toy.sequence"] == 1 and scored.scores == {"toy": 0.25}
    assert late.late and sorted(late.span_names) == ["llm", "tool"] and late.results == ()
    # The re-score read all three spans (3 / 4); only its carrier is new.
    assert carrier.span_names == ["evaluate_trace"] and carrier.scores == {"toy": 0.75}
    (carrier_span,) = carrier.spans
    assert carrier_span.parent_span_id == root_id and [link.span_id for link in carrier_span.links] == [root_id]
    assert carrier.anchor_attributes["eval.toy.sequence"] == 2
    assert carrier.anchor_attributes["eval.toy.explanation"] == "3 spans"
    sent = [s.span_id for exported in rig.exporter.exported for s in exported.spans]
    assert len(sent) == len(set(sent)) == 4
    if not workers:  # else the metric runs in the worker process
        assert [seen[2] for seen in metric.seen] == [trace_id, trace_id]
    assert rig.pipeline.counts.held_spans == 0


@SCORED_HERE_OR_IN_A_WORKER
async def test_late_spans_arriving_while_the_first_scoring_runs_rescore_it_too(rig_for, workers):
    rig = await rig_for(toy(delay_s=0.2), score=EVERY_TRACE, scoring_workers=workers)
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # released: being scored for 0.2 s
    rig.receiver.send(request_of([span(trace_id, "tool", parent=root_id)]))
    await rig.at(2.5)
    exported = rig.exporter.by_trace_id(trace_id)
    by_sequence = {
        e.anchor_attributes["eval.toy.sequence"]: (e.span_names, e.scores["toy"]) for e in exported if e.results
    }
    assert by_sequence == {1: (["root"], 0.25), 2: (["evaluate_trace"], 0.5)}
    assert [e.span_names for e in exported if not e.results] == [["tool"]]


async def test_a_trace_outside_the_scoring_scope_is_not_kept_for_late_spans(rig_for):
    rig = await rig_for(toy())  # agent traces only: this one is not
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    await rig.at(1.0)
    assert len(rig.pipeline.late) == 0 and rig.pipeline.late.span_count == 0
    rig.clock.now = 2.0
    rig.receiver.send(request_of([span(trace_id, "late", parent=root_id)]))
    await rig.at(3.0)
    assert [e.span_names for e in rig.exporter.by_trace_id(trace_id)] == [["root"], ["late"]]


@SCORED_HERE_OR_IN_A_WORKER
async def test_late_spans_rescore_at_most_max_rescores_times_and_only_within_late_window(rig_for, workers):
    metric = toy()
    rig = await rig_for(metric, score=EVERY_TRACE, max_rescores=2, late_window=100.0, scoring_workers=workers)
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id)]))
    await rig.at(1.0)
    for second in (10.0, 20.0, 30.0):
        rig.clock.now = second
        rig.receiver.send(request_of([span(trace_id, "late", parent=root_id)]))
        await rig.at(second + 1.0)
    carriers = [e for e in rig.exporter.by_trace_id(trace_id) if e.span_names == ["evaluate_trace"]]
    assert [(c.anchor_attributes["eval.toy.sequence"], c.scores["toy"]) for c in carriers] == [(2, 0.5), (3, 0.75)]
    assert len(metric.seen) == (0 if workers else 3)  # the third late span is only forwarded
    assert len(rig.pipeline.late) == 0  # nothing kept once it cannot be scored again

    other, other_root = new_trace_id(), new_span_id()
    rig.clock.now = 40.0
    rig.receiver.send(request_of([span(other, "root", span_id=other_root)]))
    await rig.at(41.0)
    rig.clock.now = 141.5  # past the window of its first scoring (at 41)
    rig.receiver.send(request_of([span(other, "late", parent=other_root)]))
    await rig.at(142.5)
    assert [e.span_names for e in rig.exporter.by_trace_id(other)] == [["root"], ["late"]]


async def test_late_memory_spans_forgets_the_oldest_scored_trace_with_a_warning(rig_for, caplog):
    rig = await rig_for(toy(), score=EVERY_TRACE, late_memory_spans=3)
    first, second = new_trace_id(), new_trace_id()
    roots = {first: new_span_id(), second: new_span_id()}
    for trace_id in (first, second):
        rig.receiver.send(
            request_of([span(trace_id, "root", span_id=roots[trace_id]), span(trace_id, "c", parent=roots[trace_id])])
        )
    with caplog.at_level(logging.WARNING, logger="spanscore.pipeline"):
        await rig.at(1.0)
    assert f"trace {first.hex()} will not be scored again" in caplog.text
    assert rig.pipeline.late.span_count == 2
    rig.clock.now = 2.0
    for trace_id in (first, second):
        rig.receiver.send(request_of([span(trace_id, "late", parent=roots[trace_id])]))
    await rig.at(3.0)
    assert [e.span_names for e in rig.exporter.by_trace_id(first)][1:] == [["late"]]
    assert rig.exporter.by_trace_id(second)[-1].scores == {"toy": 0.75}


async def test_drain_exports_every_buffered_trace_scored(rig_for):
    rig = await rig_for(toy(), score=EVERY_TRACE)
    waiting, rootless = new_trace_id(), new_trace_id()
    waiting_root = new_span_id()
    rig.receiver.send(
        request_of(
            [
                span(waiting, "root", span_id=waiting_root),
                span(waiting, "child", parent=waiting_root),
                span(rootless, "orphan", parent=new_span_id()),
            ]
        )
    )
    await rig.at(0.5)
    assert rig.exporter.exported == [] and rig.pipeline.counts.held_spans == 3
    await rig.drain()
    assert {(e.trace_id, e.complete) for e in rig.exporter.exported} == {(waiting, True), (rootless, False)}
    assert rig.exporter.only(waiting).scores == {"toy": 0.5}
    assert rig.exporter.only(rootless).scores == {"toy": 0.25}
    assert rig.pipeline.counts.held_spans == 0 and rig.pipeline.assembler.buffered_spans == 0


async def test_drain_past_its_deadline_exports_what_it_could_not_score_with_its_metrics_skipped(rig_for):
    rig = await rig_for(toy(delay_s=30.0))  # agent traces only
    scoring, queued, health_check = new_trace_id(), new_trace_id(), new_trace_id()
    turn = {**AGENT_ROOT, "session.id": "s1"}
    rig.receiver.send(request_of([span(scoring, "root", attributes=turn)]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # released, and not waited for: its scoring takes 30 s
    rig.receiver.send(request_of([span(queued, "root", attributes=turn), span(health_check, "GET /health")]))
    started = time.monotonic()
    await rig.pipeline.drain(started + 0.2, "stopped before scoring it")
    assert time.monotonic() - started < 5.0
    assert {e.trace_id for e in rig.exporter.exported if e.trace_id != health_check} == {scoring, queued} | {
        e.trace_id for e in rig.exporter.named(SESSION_SPAN_NAME)
    }
    for trace_id in (scoring, queued):
        exported = rig.exporter.only(trace_id)
        assert exported.results == () and evaluation_events(exported) == []
        assert {k: v for k, v in exported.anchor_attributes.items() if k.startswith("eval.")} == {
            "eval.toy.skipped": "stopped before scoring it"
        }
    # Outside the scoring scope, it is forwarded as it came, as ever.
    assert not [k for k in rig.exporter.only(health_check).anchor_attributes if k.startswith("eval.")]
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert carrier.anchor_attributes["eval.toy_session.skipped"] == "stopped before scoring it"
    assert carrier.anchor_attributes["eval.session.trace_count"] == 2 and carrier.results == ()
    assert {link.trace_id for link in carrier.anchor.links} == {scoring, queued}
    assert rig.pipeline.counts.held_spans == 0


async def test_exporter_gives_up_on_traces_still_held_at_its_shutdown(rig_for):
    exporter = MemoryExporter(hold=True)
    rig = await rig_for(exporters=[exporter])
    rig.receiver.send(request_of([span(new_trace_id(), "root"), span(new_trace_id(), "root")]))
    await rig.drain()
    assert exporter.held_traces == 2 and rig.pipeline.counts.held_spans == 2
    await exporter.shutdown(time.monotonic() + 1.0)
    await exporter.shutdown(time.monotonic() + 1.0)
    assert (exporter.dropped_spans, exporter.sent_spans, exporter.held_traces) == (2, 0, 0)
    assert rig.pipeline.counts.held_spans == 0
    with pytest.raises(RuntimeError, match="shut down"):
        exporter.enqueue(object())


# Backpressure ----------------------------------------------------------------------------


async def test_input_is_refused_with_retry_after_at_max_buffered_spans_until_exports_complete(rig_for):
    exporter = MemoryExporter(hold=True)
    rig = await rig_for(exporters=[exporter], max_buffered_spans=3, trace_wait=2.5)
    first, first_root = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(first, "root", span_id=first_root), span(first, "child", parent=first_root)]))
    rig.receiver.send(request_of([span(new_trace_id(), "root")]))  # 3 held now
    with pytest.raises(ConsumerFull) as refused:
        rig.receiver.send(request_of([span(new_trace_id(), "root")]))
    assert refused.value.retry_after_s == 3  # trace_wait rounded up
    assert str(refused.value) == "spanscore is holding 3 spans, its limit; retry later"
    assert (rig.pipeline.counts.refused_requests, rig.pipeline.counts.received_spans) == (1, 3)

    await rig.at(2.5)  # handed to the exporter, which has not finished with them
    assert exporter.held_traces == 2 and rig.pipeline.counts.held_spans == 3
    with pytest.raises(ConsumerFull):
        rig.receiver.send(request_of([span(new_trace_id(), "root")]))

    assert exporter.release() == 2
    assert rig.pipeline.counts.held_spans == 0 and exporter.sent_spans == 3
    rig.receiver.send(request_of([span(new_trace_id(), "root")]))
    assert (rig.pipeline.counts.refused_requests, rig.pipeline.counts.received_spans) == (2, 4)


async def test_spans_stay_held_until_every_exporter_is_done_with_them(rig_for):
    prompt, slow = MemoryExporter("memory/prompt"), MemoryExporter("memory/slow", hold=True)
    rig = await rig_for(exporters=[prompt, slow])
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id), span(trace_id, "child", parent=root_id)]))
    await rig.at(1.0)
    assert prompt.only(trace_id).span_names == slow.only(trace_id).span_names == ["root", "child"]
    assert rig.pipeline.counts.held_spans == 2 and rig.pipeline.counts.exported_traces == 0
    slow.release()
    assert rig.pipeline.counts.held_spans == 0 and rig.pipeline.counts.exported_traces == 1


# Scores on the root span -----------------------------------------------------------------


async def test_a_failing_processor_yields_an_error_result_and_the_trace_is_still_exported(rig_for):
    rig = await rig_for(toy(fail_on="boom"), toy(name="other"), score=EVERY_TRACE)
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "boom")]))
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert exported.scores == {"toy": None, "other": 0.25}
    assert exported.results[0].error == "cannot score boom" and exported.results[0].error_type == "RuntimeError"
    assert exported.anchor_attributes == {
        "eval.toy.error": "cannot score boom",
        "eval.other.score": 0.25,
        "eval.other.label": "fail",
        "eval.other.explanation": "1 spans",
        "eval.toy.sequence": 1,
        "eval.other.sequence": 1,
        **by_code("toy"),
        **by_code("other"),
    }
    events = evaluation_events(exported)
    assert [e["gen_ai.evaluation.name"].string_value for e in events] == ["toy", "other"]
    assert events[0]["error.type"].string_value == "RuntimeError"
    assert rig.pipeline.counts.held_spans == 0


async def test_one_failing_trace_in_a_batch_costs_only_that_trace_its_score(rig_for):
    rig = await rig_for(toy(fail_on="boom"), score=EVERY_TRACE)
    ids = [new_trace_id() for _ in range(3)]
    rig.receiver.send(request_of([span(ids[0], "fine"), span(ids[1], "boom"), span(ids[2], "fine")]))
    await rig.at(1.0)  # the three are ready at once: one batch
    assert [rig.exporter.only(i).scores for i in ids] == [{"toy": 0.25}, {"toy": None}, {"toy": 0.25}]


class WrongCount(Processor):
    metric_names = ("wrong_count",)

    async def process_batch(self, items):
        return []  # not one output per trace


async def test_a_batch_processor_that_loses_count_fails_each_trace_not_the_pipeline(rig_for):
    rig = await rig_for(WrongCount(), toy(), score=EVERY_TRACE)
    ids = [new_trace_id() for _ in range(2)]
    rig.receiver.send(request_of([span(ids[0], "a"), span(ids[1], "b")]))
    await rig.at(1.0)
    for trace_id in ids:
        exported = rig.exporter.only(trace_id)
        assert exported.scores == {"wrong_count": None, "toy": 0.25}
        assert "returned 0 outputs for 2 traces" in exported.anchor_attributes["eval.wrong_count.error"]
    assert rig.pipeline.counts.held_spans == 0


async def test_evaluator_usage_from_a_processor_lands_on_the_root_span(rig_for):
    rig = await rig_for(UsageReporter(), score=EVERY_TRACE)
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id), span(trace_id, "llm call", parent=root_id)]))
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert exported.scores == {"judged": 0.75}  # usage is not a result
    assert exported.anchor_attributes == {
        "eval.judged.score": 0.75,
        "eval.judged.label": "pass",
        "eval.judged.sequence": 1,
        **by_code("judged"),
        "eval.judge.calls": 2,
        "eval.judge.input_tokens": 120,
        "eval.judge.output_tokens": 30,
    }
    child = next(s for s in exported.spans if s.name == "llm call")
    assert list(child.attributes) == []


async def test_span_attributes_from_a_processor_land_on_the_root_and_the_carrier(rig_for):
    rig = await rig_for(CaseTagger(), score=EVERY_TRACE)
    first, second = new_trace_id(), new_trace_id()
    rig.receiver.send(
        request_of(
            [
                span(first, "turn", attributes={"session.id": "s1"}),
                span(second, "turn", attributes={"session.id": "s1"}),
            ]
        )
    )
    await rig.at(1.0)
    assert rig.exporter.only(first).anchor_attributes["eval.case.id"] == "oslo-weather"
    await rig.drain()
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    attributes = carrier.anchor_attributes
    assert (attributes["eval.case.id"], attributes["eval.attempt.turns"]) == ("oslo-weather", 2)
    assert carrier.scores == {"graded_session": 0.5}


async def test_scoring_a_backlog_leaves_the_event_loop_to_everything_else(rig_for):
    # the toy metric never suspends
    rig = await rig_for(toy(), score=EVERY_TRACE, scoring_concurrency=4, scoring_batch=10)
    for _ in range(600):
        rig.receiver.send(request_of([span(new_trace_id(), "root")]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # 600 traces ready at once
    seen: list[int] = []

    async def receiver():
        while rig.pipeline.counts.exported_traces < 600:
            seen.append(rig.pipeline.counts.exported_traces)
            await asyncio.sleep(0)

    await asyncio.gather(receiver(), rig.pipeline.settle())
    # Each scorer yields after a batch: the other task runs while the backlog is scored,
    # which leaves at most 4 batches of 10 at a time, not only once all 600 are done.
    steps = [after - before for before, after in zip(seen, seen[1:]) if after > before]
    assert len(steps) >= 600 // 40 - 1 and max(steps) <= 40
    assert rig.pipeline.counts.exported_traces == 600


async def test_every_score_says_who_scored_it_and_by_which_revision(rig_for):
    rig = await rig_for(ModelJudged(), toy(), score=EVERY_TRACE)
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "root")]))
    await rig.at(1.0)
    attributes = rig.exporter.only(trace_id).anchor_attributes
    assert (attributes["eval.judged.evaluator"], attributes["eval.judged.revision"]) == ("gpt-test", "rubric-7")
    assert (attributes["eval.toy.evaluator"], attributes["eval.toy.revision"]) == ("code", CODE_PROVENANCE.revision)


async def test_span_events_can_be_switched_off_and_the_attributes_stay(rig_for):
    rig = await rig_for(toy(), score=EVERY_TRACE, span_events=False)
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "root")]))
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert evaluation_events(exported) == []
    assert exported.anchor_attributes["eval.toy.score"] == 0.25


def test_a_span_attribute_outside_eval_is_refused():
    with pytest.raises(ValueError, match="must be under 'eval.'"):
        SpanAttribute("http.route", "/v1/traces")


# The in-memory receiver ------------------------------------------------------------------


async def test_receiver_reports_invalid_spans_as_partial_success_and_refuses_all_invalid_requests(rig_for):
    rig = await rig_for()
    response = rig.receiver.send(request_of([span(new_trace_id(), "root"), span(b"\x00" * 16, "zero trace id")]))
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message.startswith(
        "1 spans rejected; first problem: span with invalid trace_id"
    )
    with pytest.raises(InvalidRequest, match="all 1 spans rejected"):
        rig.receiver.send(request_of([span(new_trace_id(), "short span id", span_id=b"\x01")]))
    assert (rig.pipeline.counts.received_spans, rig.pipeline.counts.rejected_spans) == (1, 2)
    assert rig.receiver.accepted_requests == 1


async def test_receiver_refuses_input_after_shutdown(rig_for):
    rig = await rig_for()
    receiver = MemoryReceiver(rig.pipeline.intake)
    await receiver.shutdown(time.monotonic() + 1.0)  # without start
    await receiver.shutdown(time.monotonic() + 1.0)  # and twice
    with pytest.raises(RuntimeError, match="receiver memory is shut down"):
        receiver.send(request_of([span(new_trace_id(), "root")]))
    assert rig.pipeline.counts.received_spans == 0


@SCORED_HERE_OR_IN_A_WORKER
async def test_a_trace_leaves_at_max_hold_with_the_results_so_far_and_the_others_follow_on_a_carrier(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"), toy(name="slow", delay_s=0.6), score=EVERY_TRACE, max_hold=0.1, scoring_workers=workers
    )
    trace_id, root_id = new_trace_id(), new_span_id()
    rig.receiver.send(request_of([span(trace_id, "root", span_id=root_id), span(trace_id, "llm", parent=root_id)]))
    rig.clock.now = 1.0
    rig.pipeline.tick()
    await asyncio.sleep(0.4)  # past max_hold, before the slow metric
    left = rig.exporter.only(trace_id)
    assert left.span_names == ["root", "llm"] and left.scores == {"quick": 0.5}
    assert left.anchor_attributes["eval.quick.sequence"] == 1
    assert left.anchor_attributes["eval.slow.pending"] == "not scored within max_hold (100ms)"
    assert "eval.quick.pending" not in left.anchor_attributes and "eval.slow.score" not in left.anchor_attributes
    assert rig.pipeline.counts.held_spans == 0  # sent: no longer held for the scoring

    await rig.pipeline.settle()
    _, followed = rig.exporter.by_trace_id(trace_id)
    assert followed.span_names == ["evaluate_trace"] and followed.scores == {"slow": 0.5}
    (carrier,) = followed.spans
    assert carrier.parent_span_id == root_id and [link.span_id for link in carrier.links] == [root_id]
    # It completes the first scoring: sequence 1, and nothing of the quick metric again.
    assert followed.anchor_attributes["eval.slow.sequence"] == 1
    assert not [k for k in followed.anchor_attributes if k.startswith("eval.quick.") or k.endswith(".pending")]
    sent = [s.span_id for exported in rig.exporter.exported for s in exported.spans]
    assert len(sent) == len(set(sent)) == 3
    assert rig.pipeline.counts.held_spans == 0


@SCORED_HERE_OR_IN_A_WORKER
async def test_a_scoring_that_ends_within_max_hold_leaves_the_trace_whole(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"), toy(name="slow", delay_s=0.05), score=EVERY_TRACE, max_hold=5.0, scoring_workers=workers
    )
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "root")]))
    await rig.at(1.0)
    exported = rig.exporter.only(trace_id)
    assert exported.scores == {"quick": 0.25, "slow": 0.25}
    assert not [k for k in exported.anchor_attributes if k.endswith(".pending")]


@SCORED_HERE_OR_IN_A_WORKER
async def test_a_pending_metric_still_running_at_the_shutdown_deadline_follows_skipped(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"), toy(name="slow", delay_s=30.0), score=EVERY_TRACE, max_hold=0.1, scoring_workers=workers
    )
    trace_id = new_trace_id()
    rig.receiver.send(request_of([span(trace_id, "root")]))
    rig.clock.now = 1.0
    rig.pipeline.tick()
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await rig.pipeline.drain(started + 0.3, "stopped before scoring it")
    assert time.monotonic() - started < 5.0
    left, followed = rig.exporter.by_trace_id(trace_id)
    assert left.scores == {"quick": 0.25} and "eval.slow.pending" in left.anchor_attributes
    assert followed.span_names == ["evaluate_trace"] and followed.results == ()
    assert {k: v for k, v in followed.anchor_attributes.items() if k.startswith("eval.slow.")} == {
        "eval.slow.skipped": "stopped before scoring it"
    }
    assert rig.pipeline.counts.held_spans == 0


@SCORED_HERE_OR_IN_A_WORKER
async def test_a_trace_outside_the_scope_leaves_at_max_hold_as_it_came_not_after_its_batch(rig_for, workers):
    rig = await rig_for(toy(name="slow", delay_s=0.6), max_hold=0.1, scoring_workers=workers)  # agent traces only
    agent, health_check = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([span(agent, "root", attributes=AGENT_ROOT), span(health_check, "GET /health")]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # one batch
    await asyncio.sleep(0.4)
    assert not [k for k in rig.exporter.only(health_check).anchor_attributes if k.startswith("eval.")]
    assert "eval.slow.pending" in rig.exporter.only(agent).anchor_attributes
    await rig.pipeline.settle()
    assert len(rig.exporter.by_trace_id(health_check)) == 1 and len(rig.exporter.by_trace_id(agent)) == 2


@SCORED_HERE_OR_IN_A_WORKER
async def test_a_trace_waiting_for_a_scorer_leaves_at_max_hold_and_its_results_follow_once_scored(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"),
        toy(name="slow", delay_s=0.3),
        score=EVERY_TRACE,
        max_hold=0.5,
        scoring_concurrency=1,
        scoring_batch=1,
        scoring_workers=workers,
    )
    first, second = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([span(first, "root"), span(second, "root")]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # both ready: the one scorer takes the first, the second waits in line
    await asyncio.sleep(0.05)
    rig.clock.now = 1.6  # ready 600 ms ago, still without a scorer
    rig.pipeline.tick()
    left = rig.exporter.only(second)
    assert left.scores == {}
    assert {k: v for k, v in left.anchor_attributes.items() if k.endswith(".pending")} == {
        "eval.quick.pending": "not scored within max_hold (500ms)",
        "eval.slow.pending": "not scored within max_hold (500ms)",
    }
    assert rig.exporter.by_trace_id(first) == []  # scored within its max_hold: it leaves whole

    await rig.pipeline.settle()
    assert rig.exporter.only(first).scores == {"quick": 0.25, "slow": 0.25}
    _, followed = rig.exporter.by_trace_id(second)
    assert followed.span_names == ["evaluate_trace"] and followed.scores == {"quick": 0.25, "slow": 0.25}
    assert (followed.anchor_attributes["eval.quick.sequence"], followed.anchor_attributes["eval.slow.sequence"]) == (
        1,
        1,
    )
    assert rig.pipeline.counts.held_spans == 0


GIVEN_UP = "given up: results of more than {} traces were following (max_following_traces)"


@SCORED_HERE_OR_IN_A_WORKER
async def test_past_max_following_traces_the_oldest_waiting_in_line_are_given_up(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"),
        toy(name="slow", delay_s=30.0),
        score=EVERY_TRACE,
        max_hold=0.1,
        max_following_traces=2,
        scoring_concurrency=1,
        scoring_batch=1,
        scoring_workers=workers,
    )
    first, second, third, fourth = traces = [new_trace_id() for _ in range(4)]
    rig.receiver.send(request_of([span(trace_id, "root") for trace_id in traces]))
    rig.clock.now = 1.0
    rig.pipeline.tick()  # the one scorer takes the first, the others wait in line
    await asyncio.sleep(0.02)
    rig.clock.now = 1.2
    rig.pipeline.tick()  # the three waiting leave: one more than the bound, the oldest given up
    await asyncio.sleep(0.3)  # the first leaves at its max_hold: one more again
    for given_up in (second, third):
        left, followed = rig.exporter.by_trace_id(given_up)
        assert left.scores == {} and "eval.slow.pending" in left.anchor_attributes
        assert followed.span_names == ["evaluate_trace"] and followed.results == ()
        assert {k: v for k, v in followed.anchor_attributes.items() if k.endswith(".skipped")} == {
            "eval.quick.skipped": GIVEN_UP.format(2),
            "eval.slow.skipped": GIVEN_UP.format(2),
        }
    assert rig.exporter.only(first).scores == {"quick": 0.25}  # its slow metric still follows
    assert "eval.quick.pending" in rig.exporter.only(fourth).anchor_attributes
    assert len(rig.pipeline.scheduler._following) == 2
    assert rig.pipeline.scheduler.ready.unfinished == 0  # the given up left the line


@SCORED_HERE_OR_IN_A_WORKER
async def test_past_max_following_traces_the_oldest_scoring_is_cancelled_its_pending_metrics_skipped(rig_for, workers):
    rig = await rig_for(
        toy(name="quick"),
        toy(name="slow", delay_s=30.0),
        score=EVERY_TRACE,
        max_hold=0.1,
        max_following_traces=1,
        scoring_concurrency=2,
        scoring_batch=1,
        scoring_workers=workers,
    )
    older, newer = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([span(older, "root")]))
    rig.clock.now = 1.0
    rig.pipeline.tick()
    await asyncio.sleep(0.15)  # it left at max_hold, its slow metric following
    rig.receiver.send(request_of([span(newer, "root")]))
    rig.clock.now = 2.0
    rig.pipeline.tick()
    await asyncio.sleep(0.3)  # the newer left too: past the bound, the older's scoring is given up
    left, followed = rig.exporter.by_trace_id(older)
    assert left.scores == {"quick": 0.25} and "eval.slow.pending" in left.anchor_attributes
    assert followed.span_names == ["evaluate_trace"] and followed.results == ()
    assert {k: v for k, v in followed.anchor_attributes.items() if k.startswith("eval.")} == {
        "eval.slow.skipped": GIVEN_UP.format(1)
    }
    assert rig.exporter.only(newer).scores == {"quick": 0.25}
    assert len(rig.pipeline.scheduler._batches) == 1  # the older's scoring ended, its judge calls with it
    if workers:  # cancelled in the worker, not kept in flight for an answer that is ignored
        assert rig.workers is not None and rig.workers.in_flight == 1
