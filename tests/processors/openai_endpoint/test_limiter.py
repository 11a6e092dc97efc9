import asyncio
import threading

import pytest

from spanscore.processors.openai_endpoint.limiter import ConcurrencyLimit, Outcome


async def fill(limit: ConcurrencyLimit, n: int):
    return [await limit.acquire() for _ in range(n)]


async def test_a_fixed_limit_never_changes():
    limit = ConcurrencyLimit(3)
    assert not limit.adaptive and limit.limit == 3
    slots = await fill(limit, 3)
    for slot in slots:
        limit.release(slot, Outcome.OVERLOADED)
    assert limit.limit == 3 and limit.in_flight == 0 and list(limit.history) == [3]


async def test_it_grows_by_one_per_window_of_answers_with_the_limit_in_use_up_to_the_ceiling():
    limit = ConcurrencyLimit(6, start=4)
    slots = await fill(limit, 4)
    answered = 0
    while answered < 20:  # the window kept full: each answer's slot taken again at once
        limit.release(slots.pop(0), Outcome.ANSWERED)
        answered += 1
        slots += await fill(limit, limit.limit - limit.in_flight)
        # The first slot was taken with one of four in flight: its answer does not count.
        if answered == 4:
            assert list(limit.history) == [4]
        if answered == 1 + 4:
            assert list(limit.history) == [4, 5]
        if answered == 1 + 4 + 4:
            assert list(limit.history) == [4, 5]
        if answered == 1 + 4 + 5:  # a window of four answers, then one of five
            assert list(limit.history) == [4, 5, 6]
    assert limit.limit == 6 and limit.increases == 2  # the ceiling holds


async def test_a_limit_of_one_grows_after_at_least_four_answers():
    limit = ConcurrencyLimit(4, start=1)
    for answered in range(1, 5):
        limit.release(await limit.acquire(), Outcome.ANSWERED)
        assert limit.limit == (2 if answered == 4 else 1)


async def test_answers_with_the_limit_barely_used_or_slow_do_not_grow_it():
    limit = ConcurrencyLimit(8, start=4)
    for _ in range(10):
        limit.release(await limit.acquire(), Outcome.ANSWERED)  # one in flight of four: less than half used
    slots = await fill(limit, 4)
    for slot in slots:
        limit.release(slot, Outcome.HOLD)
    assert limit.limit == 4


async def test_overloads_halve_it_once_per_round_and_never_below_one():
    limit = ConcurrencyLimit(16, start=9)
    slots = await fill(limit, 9)
    for slot in slots:  # nine timeouts of one burst: one cut
        limit.release(slot, Outcome.OVERLOADED)
    assert limit.limit == 4
    for expected in (2, 1, 1):
        limit.release(await limit.acquire(), Outcome.OVERLOADED)
        assert limit.limit == expected
    assert list(limit.history) == [9, 4, 2, 1] and limit.decreases == 3


async def test_waiters_are_served_in_order_as_slots_free():
    limit = ConcurrencyLimit(1)
    first = await limit.acquire()
    order: list[int] = []

    async def take(i: int) -> None:
        slot = await limit.acquire()
        order.append(i)
        limit.release(slot, Outcome.ANSWERED)

    tasks = [asyncio.create_task(take(i)) for i in range(3)]
    await asyncio.sleep(0.01)
    assert limit.waiting == 3 and order == []
    limit.release(first, Outcome.ANSWERED)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2] and limit.in_flight == 0


async def test_a_cancelled_waiter_gives_its_slot_back():
    limit = ConcurrencyLimit(1)
    first = await limit.acquire()
    waiting = asyncio.create_task(limit.acquire())
    await asyncio.sleep(0.01)
    limit.release(first, Outcome.ANSWERED)  # the slot is on its way to `waiting`
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.01)
    assert limit.in_flight == 0 and limit.waiting == 0
    limit.release(await asyncio.wait_for(limit.acquire(), 1), None)


async def test_a_waiter_cancelled_after_its_slot_arrived_gives_it_back():
    limit = ConcurrencyLimit(1)
    first = await limit.acquire()
    waiting = asyncio.create_task(limit.acquire())
    await asyncio.sleep(0.01)
    limit.release(first, Outcome.ANSWERED)
    await asyncio.sleep(0)  # the slot is handed over: `waiting` has it, but has not run since
    waiting.cancel()  # as a scoring given up cancels the judge calls that wait
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert limit.in_flight == 0 and limit.waiting == 0
    limit.release(await asyncio.wait_for(limit.acquire(), 1), None)


async def test_one_limit_serves_waiters_on_another_event_loop():
    limit = ConcurrencyLimit(1)
    held = await limit.acquire()
    got: list[bool] = []

    def other_loop() -> None:
        async def run() -> None:
            slot = await asyncio.wait_for(limit.acquire(), 5)
            got.append(True)
            limit.release(slot, Outcome.ANSWERED)

        asyncio.run(run())

    thread = threading.Thread(target=other_loop)
    thread.start()
    while limit.waiting == 0:
        await asyncio.sleep(0.01)
    limit.release(held, Outcome.ANSWERED)
    await asyncio.to_thread(thread.join, 5)
    assert got == [True] and limit.in_flight == 0


@pytest.mark.parametrize("ceiling, start", [(0, None), (2, 0)])
def test_bounds_are_checked(ceiling, start):
    with pytest.raises(ValueError, match="concurrency limit"):
        ConcurrencyLimit(ceiling, start)
