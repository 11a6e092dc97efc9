"""Late traces of a closed session, on the pipeline rig's hand-held clock: within
`late_window` the session opens again with its earlier traces and its metrics are scored
over the whole session on a new carrier, with the next `eval.<metric>.sequence`."""

from __future__ import annotations

import logging

import pytest

from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import PREVIOUS_CARRIER_LINK, SESSION_SPAN_NAME
from spanscore.processors.base import Processor
from tests.support.spans import new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import toy

EVERY_TRACE = {"agent_traces_only": False}


class MeanOfTurns(Processor):
    """Session metric `mean_toy`: the mean of the session's `toy` scores; `turns`: how many
    turns it kept in its session state, which it takes at the close as the judge and the
    checks do (so a session opened again must get it back as it was)."""

    metric_names = ()
    uses_sessions = True

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return ("mean_toy", "turns")

    async def process_trace(self, trace, session):
        if session is not None:
            session.state.setdefault("turns", []).append(trace.trace_id)
        return []

    async def process_session(self, session):
        scores = [signals["toy"] for signals in session.signals.values()]
        turns = session.state.pop("turns", [])
        return [
            MetricResult(name="mean_toy", score=sum(scores) / len(scores)),
            MetricResult(name="turns", score=min(1.0, len(turns) / 4), metadata={"turns": len(turns)}),
        ]


def turn(trace_id: bytes, spans: int, root_id: bytes | None = None) -> list:
    """A trace of session s1 with `spans` spans (toy scores it spans / 4)."""
    root_id = root_id or new_span_id()
    root = span(trace_id, "turn", span_id=root_id, attributes={"session.id": "s1"})
    return [root, *(span(trace_id, f"step{i}", parent=root_id) for i in range(spans - 1))]


def carrier_values(carrier) -> tuple:
    attributes = carrier.anchor_attributes
    return (
        attributes["eval.session.trace_count"],
        pytest.approx(attributes["eval.mean_toy.score"]),
        attributes["eval.turns.score"],
        attributes["eval.mean_toy.sequence"],
        attributes["eval.turns.sequence"],
    )


async def first_close(rig) -> tuple[bytes, bytes]:
    """Session s1 of two traces (toy 0.25 and 0.5) closed at 61: its carrier out."""
    first, second = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([*turn(first, 1), *turn(second, 2)]))
    await rig.at(1.0)
    await rig.at(61.0)
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert carrier_values(carrier) == (2, 0.375, 0.5, 1, 1)
    return first, second


async def test_a_new_trace_within_late_window_scores_the_session_again_over_all_its_traces(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, late_window=600.0)
    first, second = await first_close(rig)
    assert rig.pipeline.sessions.remembered == ["s1"]

    third = new_trace_id()
    rig.clock.now = 100.0
    rig.receiver.send(request_of(turn(third, 4)))
    await rig.at(101.0)
    assert list(rig.pipeline.sessions.open) == ["s1"] and rig.pipeline.sessions.remembered == []
    await rig.at(160.5)
    assert len(rig.exporter.named(SESSION_SPAN_NAME)) == 1  # idle since 101
    await rig.at(161.0)
    earlier, carrier = rig.exporter.named(SESSION_SPAN_NAME)
    # (0.25 + 0.5 + 1.0) / 3, and the three turns: the first two as kept before the first close.
    assert carrier_values(carrier) == (3, 1.75 / 3, 0.75, 2, 2)
    assert carrier.session_id == "s1" and carrier.trace_id != earlier.trace_id
    links = {(link.trace_id, link.span_id): link for link in carrier.anchor.links}
    assert {trace_id for trace_id, _ in links} == {first, second, third, earlier.trace_id}
    previous = links[(earlier.trace_id, earlier.anchor.span_id)]
    assert [(kv.key, kv.value.bool_value) for kv in previous.attributes] == [(PREVIOUS_CARRIER_LINK, True)]
    assert all(not link.attributes for key, link in links.items() if key[0] != earlier.trace_id)
    sent = [s.span_id for exported in rig.exporter.exported for s in exported.spans]
    assert len(sent) == len(set(sent)) == 9  # 1 + 2 + 4 spans of the traces, two carriers


async def test_a_trace_of_a_closed_session_rescored_for_late_spans_scores_the_session_again(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, late_window=600.0)
    first_root = new_span_id()
    first, second = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([*turn(first, 1, first_root), *turn(second, 2)]))
    await rig.at(1.0)
    await rig.at(61.0)
    rig.clock.now = 100.0
    rig.receiver.send(request_of([span(first, "late_tool", parent=first_root)]))  # its toy: 0.25 -> 0.5
    await rig.at(101.0)
    trace_carrier = rig.exporter.by_trace_id(first)[-1]
    assert trace_carrier.span_names == ["evaluate_trace"] and trace_carrier.scores == {"toy": 0.5}
    assert list(rig.pipeline.sessions.open) == ["s1"]
    await rig.at(161.0)
    earlier, carrier = rig.exporter.named(SESSION_SPAN_NAME)
    # Still two traces: the first's new score (0.5) in place of its old one; its turn not
    # added twice (the re-score reads the trace alone).
    assert carrier_values(earlier) == (2, 0.375, 0.5, 1, 1)
    assert carrier_values(carrier) == (2, 0.5, 0.5, 2, 2)


async def test_a_rescored_trace_of_an_open_session_replaces_its_scores_there(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0)
    first_root = new_span_id()
    first, second = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([*turn(first, 1, first_root), *turn(second, 2)]))
    await rig.at(1.0)
    rig.clock.now = 30.0
    rig.receiver.send(request_of([span(first, "late_tool", parent=first_root)]))
    await rig.at(31.0)
    await rig.at(91.0)  # idle since the re-score at 31
    [carrier] = rig.exporter.named(SESSION_SPAN_NAME)
    assert carrier_values(carrier) == (2, 0.5, 0.5, 1, 1)


async def test_max_rescores_then_a_later_trace_opens_a_new_session_as_before(rig_for, caplog):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, late_window=600.0, max_rescores=1)
    await first_close(rig)
    rig.clock.now = 100.0
    rig.receiver.send(request_of(turn(new_trace_id(), 4)))
    await rig.at(101.0)
    with caplog.at_level(logging.INFO, logger="spanscore.pipeline"):
        await rig.at(161.0)
    assert "session s1 scored again 1 times (max_rescores): a later trace of it opens a new session" in caplog.text
    assert rig.pipeline.sessions.remembered == []
    rig.clock.now = 200.0
    rig.receiver.send(request_of(turn(new_trace_id(), 3)))
    await rig.at(201.0)
    await rig.at(261.0)
    carriers = rig.exporter.named(SESSION_SPAN_NAME)
    assert [carrier_values(c) for c in carriers] == [
        (2, 0.375, 0.5, 1, 1),
        (3, 1.75 / 3, 0.75, 2, 2),
        (1, 0.75, 0.25, 1, 1),
    ]


async def test_a_trace_after_late_window_opens_a_new_session_as_before(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, late_window=30.0)
    await first_close(rig)
    rig.clock.now = 91.5  # closed at 61: its window ended at 91
    rig.receiver.send(request_of(turn(new_trace_id(), 4)))
    await rig.at(92.5)
    await rig.at(152.5)
    carriers = rig.exporter.named(SESSION_SPAN_NAME)
    assert [carrier_values(c) for c in carriers] == [(2, 0.375, 0.5, 1, 1), (1, 1.0, 0.25, 1, 1)]
    assert not any(link.attributes for link in carriers[1].anchor.links)


async def test_closed_sessions_kept_are_bounded_by_max_open_sessions_forgetting_the_first_closed(rig_for, caplog):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, max_open_sessions=2)
    for second, session_id in enumerate(("s1", "s2", "s3")):
        rig.clock.now = float(second)
        rig.receiver.send(request_of([span(new_trace_id(), "turn", attributes={"session.id": session_id})]))
        await rig.at(second + 1.0)
    with caplog.at_level(logging.WARNING, logger="spanscore.pipeline"):
        await rig.at(63.0)
    assert rig.pipeline.sessions.remembered == ["s2", "s3"] and rig.pipeline.sessions.forgotten.total == 1
    assert (
        "more than 2 closed sessions kept for late traces (max_open_sessions): session s1 is forgotten" in caplog.text
    )


async def test_nothing_is_remembered_when_late_spans_are_only_forwarded(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0, late_spans="forward")
    await first_close(rig)
    assert rig.pipeline.sessions.remembered == []
    rig.clock.now = 100.0
    rig.receiver.send(request_of(turn(new_trace_id(), 4)))
    await rig.at(101.0)
    await rig.at(161.0)
    assert carrier_values(rig.exporter.named(SESSION_SPAN_NAME)[1]) == (1, 1.0, 0.25, 1, 1)


async def test_a_session_closed_at_shutdown_is_not_remembered(rig_for):
    rig = await rig_for(toy(), MeanOfTurns(), score=EVERY_TRACE, session_idle=60.0)
    rig.receiver.send(request_of(turn(new_trace_id(), 1)))
    await rig.at(1.0)
    await rig.drain()
    assert rig.pipeline.sessions.remembered == [] and len(rig.exporter.named(SESSION_SPAN_NAME)) == 1
