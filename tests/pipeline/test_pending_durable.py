"""Results still to follow a trace that left at `max_hold`, across a restart with
file_storage: the trace is scored again at start and only its pending metrics follow,
on a carrier with sequence 1; its spans are not sent again. A crash is the storage
directory as it was at that moment (copied while the first pipeline runs); a stop is
the shutdown's drain."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time

import pytest

from spanscore.core.score_encoding import SESSION_SPAN_NAME
from spanscore.extensions.pending_copies import PendingCopies
from tests.support.spans import new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import toy

EVERY_TRACE = {"agent_traces_only": False}
SCORED_HERE_OR_IN_A_WORKER = pytest.mark.parametrize("workers", [0, 1], ids=["in_process", "scoring_workers"])


async def rig_with(rig_for, storage, delay_s: float, workers: int, **settings):
    return await rig_for(
        toy(name="quick"),
        toy(name="slow", delay_s=delay_s),
        score=EVERY_TRACE,
        max_hold=0.1,
        scoring_workers=workers,
        storage=storage,
        **settings,
    )


async def left_pending(rig, spans: int = 2, session: str | None = None) -> tuple[bytes, bytes]:
    """A trace sent, released and gone to the exporter at max_hold with `slow` pending."""
    trace_id, root_id = new_trace_id(), new_span_id()
    children = [span(trace_id, f"step {n}", parent=root_id) for n in range(spans - 1)]
    root = span(trace_id, "root", span_id=root_id, attributes={"session.id": session} if session else None)
    rig.receiver.send(request_of([root, *children]))
    rig.clock.now += 2.0
    rig.pipeline.tick()
    await asyncio.sleep(0.4)
    left = rig.exporter.only(trace_id)
    assert left.scores == {"quick": spans / 4} and "eval.slow.pending" in left.anchor_attributes
    return trace_id, root_id


def still_pending(storage) -> list[bytes]:
    copies = PendingCopies(storage)
    try:
        return [copy.trace_id for copy in copies.open()]
    finally:
        copies.close()


@SCORED_HERE_OR_IN_A_WORKER
async def test_after_a_crash_the_pending_results_follow_on_a_carrier_and_no_span_is_sent_again(
    rig_for, tmp_path, workers
):
    first = await rig_with(rig_for, tmp_path / "s", 30.0, workers)
    trace_id, root_id = await left_pending(first)
    shutil.copytree(tmp_path / "s", tmp_path / "crashed")  # the disk as a SIGKILL leaves it

    again = await rig_with(rig_for, tmp_path / "crashed", 0.0, workers)
    await again.at(1.0)  # taken back in line at 0.0, past max_hold here: it left before, it does not leave again
    [followed] = again.exporter.by_trace_id(trace_id)  # the carrier only: the root was sent
    assert followed.span_names == ["evaluate_trace"] and followed.spans[0].parent_span_id == root_id
    assert followed.scores == {"slow": 0.5}  # scored with both spans, as scored before the crash
    assert followed.anchor_attributes["eval.slow.sequence"] == 1
    assert not [k for k in followed.anchor_attributes if k.startswith("eval.quick.") or k.endswith(".pending")]
    await again.drain()
    assert still_pending(tmp_path / "crashed") == []  # followed: not scored at the next start


@SCORED_HERE_OR_IN_A_WORKER
async def test_at_a_stop_the_pending_results_are_left_to_the_next_start_not_sent_as_skipped(
    rig_for, tmp_path, workers, caplog
):
    first = await rig_with(rig_for, tmp_path, 30.0, workers)
    trace_id, _ = await left_pending(first)
    with caplog.at_level(logging.WARNING, "spanscore.pipeline"):
        await first.drain()
    assert len(first.exporter.by_trace_id(trace_id)) == 1  # no carrier of skipped results
    assert "results still to follow 1 traces are kept in file_storage" in caplog.text
    assert still_pending(tmp_path) == [trace_id]

    again = await rig_with(rig_for, tmp_path, 0.0, workers)
    await again.at(1.0)
    [followed] = again.exporter.by_trace_id(trace_id)
    assert followed.scores == {"slow": 0.5} and followed.anchor_attributes["eval.slow.sequence"] == 1


async def test_results_that_followed_before_the_stop_are_not_scored_again(rig_for, tmp_path):
    first = await rig_with(rig_for, tmp_path, 0.5, 0)
    trace_id, _ = await left_pending(first)
    await first.pipeline.settle()
    assert len(first.exporter.by_trace_id(trace_id)) == 2  # the root, then the carrier
    await first.drain()

    again = await rig_with(rig_for, tmp_path, 0.0, 0)
    await again.at(1.0)
    assert again.exporter.exported == [] and still_pending(tmp_path) == []


async def test_results_given_up_past_max_following_traces_are_not_kept_for_a_restart(rig_for, tmp_path):
    rig = await rig_with(rig_for, tmp_path, 30.0, 0, max_following_traces=1, scoring_batch=1, scoring_concurrency=2)
    older, _ = await left_pending(rig)
    newer, _ = await left_pending(rig)  # past the bound: the older's results are given up
    assert "eval.slow.skipped" in rig.exporter.by_trace_id(older)[1].anchor_attributes
    assert still_pending(tmp_path) == [newer]


async def test_a_restart_without_the_pending_metrics_gives_them_up_with_a_warning(rig_for, tmp_path, caplog):
    first = await rig_with(rig_for, tmp_path, 30.0, 0)
    trace_id, _ = await left_pending(first)
    await first.drain()

    with caplog.at_level(logging.WARNING, "spanscore.pipeline"):
        again = await rig_for(toy(name="quick"), score=EVERY_TRACE, storage=tmp_path)  # `slow` is gone
    await again.at(1.0)
    assert again.exporter.exported == []
    assert "results still to follow 1 traces at the last stop are given up" in caplog.text
    assert still_pending(tmp_path) == []


@pytest.mark.parametrize("judge_after", ["answers", "still_silent"])
async def test_a_trace_of_an_open_session_replayed_after_a_crash_is_scored_once_for_both(
    rig_for, tmp_path, judge_after
):
    """The log keeps a trace of an open session to score it again for the session after a
    crash; the pending copy does not score it a second time, and its results follow once."""
    first = await rig_with(rig_for, tmp_path / "s", 30.0, 0, session_idle=600.0)
    trace_id, root_id = await left_pending(first, session="s1")
    shutil.copytree(tmp_path / "s", tmp_path / "crashed")

    again = await rig_with(rig_for, tmp_path / "crashed", 0.0 if judge_after == "answers" else 30.0, 0)
    again.clock.now = 3.0
    again.pipeline.tick()  # the replayed trace released, scored in its session
    await asyncio.sleep(0.4)  # past max_hold: it does not leave again
    if judge_after == "answers":
        [followed] = again.exporter.by_trace_id(trace_id)
        assert followed.span_names == ["evaluate_trace"] and followed.spans[0].parent_span_id == root_id
        assert followed.scores == {"slow": 0.5} and followed.anchor_attributes["eval.slow.sequence"] == 1
        assert still_pending(tmp_path / "crashed") == []
        await again.drain()
        [session] = again.exporter.named(SESSION_SPAN_NAME)  # the session holds the trace, once
        assert [link.span_id for link in session.spans[0].links] == [root_id]
    else:
        assert again.exporter.by_trace_id(trace_id) == []
        await again.drain()  # still following at the stop: left to the next start
        assert still_pending(tmp_path / "crashed") == [trace_id]


async def test_at_a_stop_a_trace_that_left_while_waiting_in_line_is_kept_not_said_unscored(rig_for, tmp_path, caplog):
    rig = await rig_with(rig_for, tmp_path, 30.0, 0, scoring_concurrency=1, scoring_batch=1)
    being_scored, waiting = new_trace_id(), new_trace_id()
    rig.receiver.send(request_of([span(being_scored, "root"), span(waiting, "root")]))
    rig.clock.now = 2.0
    rig.pipeline.tick()  # the one scorer takes the first; the second waits in line
    await asyncio.sleep(0.02)
    rig.clock.now = 3.0
    rig.pipeline.tick()  # past max_hold in line: the second leaves, and stays in line
    with caplog.at_level(logging.WARNING, "spanscore.pipeline"):
        await rig.pipeline.drain(time.monotonic())  # the deadline is now: the first is cut off
    assert "1 traces being scored and 0 waiting leave unscored" in caplog.text
    assert "results still to follow 1 traces are kept in file_storage" in caplog.text
    assert still_pending(tmp_path) == [waiting]
    assert "eval.slow.skipped" in rig.exporter.only(being_scored).anchor_attributes
