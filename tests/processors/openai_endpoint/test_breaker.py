"""The circuit breaker's states, delays and waits; time is a hand-moved clock where the
test is about when something may happen, real where it is about who waits."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from spanscore.processors.openai_endpoint.breaker import BreakerState, CircuitBreaker, Hold, Unreachable


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def breaker(clock=None, **settings) -> CircuitBreaker:
    settings.setdefault("probe_delay_s", 1.0)
    settings.setdefault("max_probe_delay_s", 4.0)
    settings.setdefault("max_wait_s", 30.0)
    return CircuitBreaker("judge 'm' at http://judge/v1", clock=clock or time.monotonic, **settings)


def fail(b: CircuitBreaker, times: int, reason: str = "connection refused") -> None:
    for _ in range(times):
        b.failed(False, reason)


async def goes_at_once(b: CircuitBreaker, hold: Hold | None = None) -> bool | None:
    """What `admit` returns when it returns without waiting; None when it would wait."""
    try:
        return await asyncio.wait_for(b.admit(hold or Hold()), 0.05)
    except asyncio.TimeoutError:
        return None


def test_five_outage_failures_in_a_row_open_it_and_an_answer_in_between_starts_the_count_again():
    b = breaker(Clock())
    fail(b, 4)
    b.answered()
    fail(b, 4)
    assert b.state is BreakerState.CLOSED and b.opened == 0
    fail(b, 1)
    assert b.state is BreakerState.OPEN and b.opened == 1


async def test_probes_go_one_at_a_time_after_a_delay_that_doubles_up_to_the_cap():
    clock = Clock()
    b = breaker(clock)
    fail(b, 5)  # opened at t=0: the first probe may go at t=1
    clock.now = 0.99
    assert await goes_at_once(b) is None
    clock.now = 1.0
    assert await goes_at_once(b) is True and b.state is BreakerState.HALF_OPEN
    assert await goes_at_once(b) is None  # one probe at a time
    b.failed(True, "HTTP 503: Loading model")  # next delay 2 s
    assert b.state is BreakerState.OPEN
    clock.now = 2.99
    assert await goes_at_once(b) is None
    clock.now = 3.0
    assert await goes_at_once(b) is True
    b.failed(True, "HTTP 503: Loading model")  # 4 s, the cap
    clock.now = 7.0
    assert await goes_at_once(b) is True
    b.failed(True, "HTTP 503: Loading model")  # 8 s capped at 4 s
    clock.now = 10.99
    assert await goes_at_once(b) is None
    clock.now = 11.0
    assert await goes_at_once(b) is True
    b.answered()
    assert b.state is BreakerState.CLOSED and await goes_at_once(b) is False


async def test_a_retry_after_sets_the_next_probe_within_the_cap():
    clock = Clock()
    b = breaker(clock)
    fail(b, 5)
    clock.now = 1.0
    assert await goes_at_once(b) is True
    b.failed(True, "HTTP 503: busy", retry_after_s=2.5)
    clock.now = 3.49
    assert await goes_at_once(b) is None
    clock.now = 3.5
    assert await goes_at_once(b) is True
    b.failed(True, "HTTP 503: busy", retry_after_s=3600)
    clock.now = 7.5  # 3.5 + the 4 s cap, not an hour
    assert await goes_at_once(b) is True


async def test_a_call_held_for_max_wait_gets_unreachable_with_the_last_reason():
    clock = Clock()
    b = breaker(clock, max_wait_s=10.0)
    fail(b, 4, "connection refused")
    fail(b, 1, "HTTP 503: Loading model")
    hold = Hold()
    clock.now = 0.5
    assert await goes_at_once(b, hold) is None  # held from t=0.5
    clock.now = 1.0
    assert await goes_at_once(b) is True  # another call probes, and gets no answer
    clock.now = 10.49
    assert b.remaining_s(hold) == pytest.approx(0.01)
    clock.now = 10.5
    with pytest.raises(Unreachable, match=r"^unreachable for 10s: HTTP 503: Loading model$"):
        await b.admit(hold)


async def test_a_probe_that_was_never_sent_lets_the_next_call_probe_at_once():
    clock = Clock()
    b = breaker(clock)
    fail(b, 5)
    clock.now = 1.0
    assert await goes_at_once(b) is True
    b.abandon(True)
    assert b.state is BreakerState.OPEN
    assert await goes_at_once(b) is True


async def test_an_answer_releases_every_waiting_call_async_and_sync():
    b = breaker(probe_delay_s=0.2, max_probe_delay_s=0.2)
    fail(b, 5)
    started = time.monotonic()
    calls = [asyncio.create_task(b.admit(Hold())) for _ in range(3)]
    in_thread: list[bool] = []
    thread = threading.Thread(target=lambda: in_thread.append(b.admit_sync(Hold())))
    thread.start()
    while b.state is not BreakerState.HALF_OPEN:
        await asyncio.sleep(0.01)
    assert time.monotonic() - started >= 0.2
    await asyncio.sleep(0.05)
    # One of the four went as the probe; the other three are still held.
    assert sum(call.done() for call in calls) + len(in_thread) == 1 and b.held == 3
    b.answered()
    thread.join(1.0)
    assert sorted([*(await asyncio.gather(*calls)), *in_thread]) == [False, False, False, True]
    assert b.held == 0


def test_answered_since_tells_a_calls_own_failures_from_an_outage():
    b = breaker(Clock())
    hold = Hold()
    assert not b.answered_since(hold)  # not held yet
    b.failed(False, "HTTP 500: boom")
    b.remaining_s(hold)  # the hold starts at this call's first outage failure
    assert not b.answered_since(hold)
    b.answered()  # another call was answered
    assert b.answered_since(hold)
