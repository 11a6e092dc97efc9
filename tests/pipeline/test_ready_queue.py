"""The ready queue: batches of distinct sessions, each session's traces in order, one out at a time."""

from __future__ import annotations

import asyncio

import pytest

from spanscore.core.trace import Trace
from spanscore.pipeline.ready_queue import ReadyQueue


def trace(name: str, session: str | None) -> Trace:
    made = Trace(name.encode().ljust(16, b"\0"), 0.0)
    made.session_id = session
    return made


def names(traces: list[Trace]) -> list[str]:
    return [t.trace_id.rstrip(b"\0").decode() for t in traces]


async def test_a_batch_holds_one_trace_per_session_and_the_next_waits_for_release():
    queue = ReadyQueue(batch_size=10)
    for name, session in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("n1", None), ("a3", "a"), ("n2", None)]:
        queue.put(trace(name, session))
    first = await queue.get_batch()
    assert names(first) == ["a1", "b1", "n1", "n2"]
    assert len(queue) == 2
    for done in first:
        queue.release(done)
    queue.done(first)
    assert names(await queue.get_batch()) == ["a2"]  # released a1; a3 stays behind a2


async def test_a_released_sessions_next_trace_goes_ahead_of_the_backlog():
    """Behind a backlog longer than session_idle, a session's turns would be scored so far
    apart that the session closed between them."""
    queue = ReadyQueue(batch_size=2)
    queue.put(trace("a1", "a"))
    queue.put(trace("a2", "a"))
    for i in range(4):
        queue.put(trace(f"x{i}", f"other{i}"))
    first = await queue.get_batch()
    assert names(first) == ["a1", "x0"]
    for done in first:
        queue.release(done)
    queue.done(first)
    assert names(await queue.get_batch()) == ["a2", "x1"]  # not behind x1, x2, x3


async def test_batches_are_cut_at_the_batch_size_and_a_getter_waits_for_traces():
    queue = ReadyQueue(batch_size=2)
    waiting = asyncio.ensure_future(queue.get_batch())
    await asyncio.sleep(0)
    assert not waiting.done()
    for i in range(3):
        queue.put(trace(f"t{i}", f"s{i}"))
    assert names(await waiting) == ["t0", "t1"]
    assert names(await queue.get_batch()) == ["t2"]


async def test_without_ordered_sessions_traces_of_one_session_go_together():
    queue = ReadyQueue(batch_size=10, ordered_sessions=False)
    for i in range(3):
        queue.put(trace(f"t{i}", "same"))
    assert names(await queue.get_batch()) == ["t0", "t1", "t2"]


async def test_join_waits_for_done_and_take_all_empties_held_traces_too():
    queue = ReadyQueue(batch_size=1)
    for name in ("a1", "a2", "b1"):
        queue.put(trace(name, name[0]))
    joined = asyncio.ensure_future(queue.join())
    batch = await queue.get_batch()
    assert names(batch) == ["a1"]
    assert sorted(names(queue.take_all())) == ["a2", "b1"]
    await asyncio.sleep(0)
    assert not joined.done()  # a1 is still out
    queue.done(batch)
    await asyncio.wait_for(joined, 1.0)


async def test_a_cancelled_getter_passes_its_wake_up_on():
    queue = ReadyQueue(batch_size=1)
    first, second = asyncio.ensure_future(queue.get_batch()), asyncio.ensure_future(queue.get_batch())
    await asyncio.sleep(0)
    queue.put(trace("t", "s"))  # wakes the first getter...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    assert names(await asyncio.wait_for(second, 1.0)) == ["t"]


async def test_no_more_than_max_out_traces_are_out_at_once():
    queue = ReadyQueue(batch_size=4, max_out=3)
    for i in range(5):
        queue.put(trace(f"t{i}", f"s{i}"))
    first = await queue.get_batch()
    assert names(first) == ["t0", "t1", "t2"]
    waiting = asyncio.ensure_future(queue.get_batch())
    await asyncio.sleep(0)
    assert not waiting.done()  # three are out
    queue.done(first)
    assert names(await asyncio.wait_for(waiting, 1.0)) == ["t3", "t4"]


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        ReadyQueue(batch_size=0)
