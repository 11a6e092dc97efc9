"""How many requests an endpoint keeps in flight: a fixed cap, or one that adapts to the
server (additive increase, multiplicative decrease, as TCP and adaptive concurrency
limiters do).

A server with fewer slots than requests sent queues the rest with their connections
open, so every queued request's latency grows with the queue, until it times out; a
server that refuses instead answers 429 or 503. Either way sending more only makes it
worse. An adaptive limit starts low (`start`) and:

- grows by one after a window of successes (as many as the limit, at least
  `MIN_WINDOW`: a server that takes one request at a time is probed with two every
  few answers, not after each) up to `ceiling`,
  counting only requests sent while at least half the limit was in use (a limit never
  used says nothing about whether the server could take more), and only answers that
  came back in less than `slow_s`: an answer close to the timeout means requests already queue
  at the server;
- halves (never below one) on overload: a request that timed out or was answered 429
  or 503. Once per round: the overloads of requests sent before the last decrease
  were caused by the limit already cut, and do not cut it again.

A fixed limit (`start` None) is a semaphore of `ceiling`. Waiters are served in the
order they came. Time spent waiting here is not a request's: its timeout starts when it
is sent.

Threading: thread-safe; `acquire` may be awaited on any event loop (one limit for
every loop of the process, as the server behind it is one).
"""

from __future__ import annotations

import asyncio
import enum
import math
import threading
from collections import deque
from dataclasses import dataclass

HISTORY = 64  # limits kept, for telemetry and tests
MIN_WINDOW = 4  # answers in time before the limit grows, whatever the limit


class Outcome(enum.Enum):
    """What a request's end says about the server's capacity."""

    ANSWERED = enum.auto()  # in time: room for more
    HOLD = enum.auto()  # answered past `slow_s`, or a failure that says nothing of load: no change
    OVERLOADED = enum.auto()  # a timeout, 429 or 503: halve


@dataclass(frozen=True)
class Slot:
    """A request's place in flight: the round it was sent in and whether the limit was in use."""

    round: int
    in_use: bool  # at least half the limit in flight with it


class ConcurrencyLimit:
    """See the module docstring."""

    def __init__(self, ceiling: int, start: int | None = None, slow_s: float = math.inf):
        if ceiling < 1 or (start is not None and not 1 <= start):
            raise ValueError(f"a concurrency limit needs ceiling >= 1 and start >= 1, got {ceiling}, {start}")
        self.ceiling = ceiling
        self.adaptive = start is not None
        self.limit = ceiling if start is None else min(start, ceiling)
        self.slow_s = slow_s
        self.in_flight = 0
        self.decreases = 0
        self.increases = 0
        self.history: deque[int] = deque([self.limit], maxlen=HISTORY)  # the limit, then after each change
        self._round = 0  # bumped by each decrease
        self._answered = 0  # successes toward the next increase
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[Slot]]] = deque()

    def __repr__(self) -> str:
        kind = "adaptive" if self.adaptive else "fixed"
        return f"ConcurrencyLimit({kind}, limit={self.limit}, ceiling={self.ceiling}, in_flight={self.in_flight})"

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return len(self._waiters)

    async def acquire(self) -> Slot:
        """Wait for a slot (first come, first served); give it back with `release`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._waiters and self.in_flight < self.limit:
                return self._take()
            waiter = (loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            return await waiter[1]
        except asyncio.CancelledError:
            with self._lock:
                if waiter in self._waiters:  # not granted: nothing to give back
                    self._waiters.remove(waiter)
            # A slot granted meanwhile is given back by `_handed` once it finds the future
            # cancelled; one it handed before the cancel (the future holds it), here.
            future = waiter[1]
            if future.done() and not future.cancelled():
                self.release(future.result(), None)
            raise

    def release(self, slot: Slot, outcome: Outcome | None) -> None:
        """Give a slot back, saying what its request's end means (None: it was never sent)."""
        with self._lock:
            self.in_flight -= 1
            if self.adaptive and outcome is not None:
                self._adapt(slot, outcome)
            self._grant()

    def _take(self) -> Slot:
        self.in_flight += 1
        return Slot(self._round, self.in_flight * 2 >= self.limit)

    def _adapt(self, slot: Slot, outcome: Outcome) -> None:
        if outcome is Outcome.OVERLOADED:
            if slot.round == self._round:
                self._round += 1
                self._answered = 0
                if self.limit > 1:
                    self._change(max(1, self.limit // 2))
                    self.decreases += 1
        elif outcome is Outcome.ANSWERED and slot.in_use and self.limit < self.ceiling:
            self._answered += 1
            if self._answered >= max(self.limit, MIN_WINDOW):
                self._answered = 0
                self._change(self.limit + 1)
                self.increases += 1

    def _change(self, limit: int) -> None:
        self.limit = limit
        self.history.append(limit)

    def _grant(self) -> None:
        """Hand free slots to the waiters in order. Called with the lock held."""
        while self._waiters and self.in_flight < self.limit:
            loop, future = self._waiters.popleft()
            slot = self._take()
            try:
                loop.call_soon_threadsafe(self._handed, future, slot)
            except RuntimeError:  # that loop is closed: its waiter is gone with it
                self.in_flight -= 1

    def _handed(self, future: asyncio.Future[Slot], slot: Slot) -> None:
        if future.done():  # cancelled while the slot was on its way
            self.release(slot, None)
        else:
            future.set_result(slot)


__all__ = ["ConcurrencyLimit", "Outcome", "Slot"]
