"""A circuit breaker per model server: an outage holds calls instead of failing them.

A server being restarted, loading a model or failing over answers no one for a while.
Retries with backoff cover a few seconds; past that every call would give up, and every
trace scored meanwhile would lose its scores. Instead:

- closed: requests go out. `failure_threshold` outage failures in a row, whoever's
  (`retry.outage_reason`: no connection, a timeout, HTTP 5xx), open the breaker.
- open: no request goes out; calls wait, holding no connection and no concurrency slot.
  After a delay one waiting call goes out as the probe (half-open). The delay starts at
  `probe_delay_s` and doubles after each failed probe up to `max_probe_delay_s`; a
  server's `Retry-After` replaces it, within the same cap.
- half-open: the probe is in flight and the others keep waiting. Its failure opens the
  breaker again; an answer closes it, and every waiting call goes out.

Any answer means the server is up, so it closes the breaker: a 400 or a reply that does
not parse stays the caller's business. A call gives up with `Unreachable` once it has
been held `max_wait_s`, counted from its first outage failure or from the moment it
first found the breaker open, whichever came first.

Threading: thread-safe. `admit` may be awaited on any event loop and `admit_sync`
called from any thread; a change of state wakes both kinds of waiters.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from spanscore.core.durations import format_duration

DEFAULT_FAILURE_THRESHOLD = 5
DEFAULT_MAX_WAIT_S = 600.0

_log = logging.getLogger(__name__)


class BreakerState(enum.IntEnum):
    """Numbered as the `spanscore_*_breaker_state` gauges report them."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2


class Unreachable(Exception):
    """A call was held by an outage for its whole `max_wait_s`; `reason` is the last
    outage failure seen ("connection refused", "HTTP 503: Loading model")."""

    def __init__(self, waited_s: float, reason: str):
        super().__init__(f"unreachable for {format_duration(waited_s)}: {reason}")
        self.waited_s = waited_s
        self.reason = reason


@dataclass
class Hold:
    """One call's time held by an outage, across all its attempts."""

    since: float | None = None  # when the outage first held the call
    answers: int = 0  # the breaker's count of answers then

    def excuse(self, seconds: float) -> None:
        """Leave out of the hold time the call spent on something else (waiting its turn
        for a concurrency slot)."""
        if self.since is not None:
            self.since += seconds


class CircuitBreaker:
    """See the module docstring. `name` says whose breaker it is in log lines."""

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = DEFAULT_FAILURE_THRESHOLD,
        probe_delay_s: float = 0.5,
        max_probe_delay_s: float = 30.0,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if failure_threshold < 1 or probe_delay_s <= 0 or max_probe_delay_s < probe_delay_s or max_wait_s <= 0:
            raise ValueError(
                "a breaker needs failure_threshold >= 1, 0 < probe_delay_s <= max_probe_delay_s and max_wait_s > 0"
            )
        self.name = name
        self.failure_threshold = failure_threshold
        self.probe_delay_s = probe_delay_s
        self.max_probe_delay_s = max_probe_delay_s
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # wakes `admit_sync` waiters
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = set()
        self._state = BreakerState.CLOSED
        self._failures = 0  # outage failures in a row
        self._answers = 0
        self._reason = ""
        self._opened_at = 0.0
        self._probe_at = 0.0
        self._next_delay_s = probe_delay_s
        self.held = 0  # calls waiting now
        self.opened = 0  # outages seen: times the breaker went from closed to open

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def answers(self) -> int:
        """How many answers the server has given so far."""
        return self._answers

    # -- admission -------------------------------------------------------------------
    async def admit(self, hold: Hold) -> bool:
        """Wait until a request may go out; True when it goes as the probe, whose outcome
        must be reported (`answered`, `failed`) or given back (`abandon`). Raises
        Unreachable once the call has been held `max_wait_s`."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                probe, wait_s = self._admission(hold)
                if probe is not None:
                    return probe
                waiter = (loop, loop.create_future())
                self._waiters.add(waiter)
                self.held += 1
            try:
                await asyncio.wait((waiter[1],), timeout=wait_s)
            finally:
                with self._lock:
                    self._waiters.discard(waiter)
                    self.held -= 1

    def admit_sync(self, hold: Hold) -> bool:
        """`admit` for threads: blocks the calling thread while it waits."""
        with self._lock:
            while True:
                probe, wait_s = self._admission(hold)
                if probe is not None:
                    return probe
                self.held += 1
                try:
                    self._changed.wait(wait_s)
                finally:
                    self.held -= 1

    def _admission(self, hold: Hold) -> tuple[bool | None, float]:
        """(is the probe, 0) when the request may go now, else (None, seconds to wait).
        Called under the lock."""
        now = self._clock()
        if self._state is BreakerState.CLOSED:
            return False, 0.0
        if self._state is BreakerState.OPEN and now >= self._probe_at:
            self._state = BreakerState.HALF_OPEN
            return True, 0.0
        left = self._left_s(hold, now)
        if self._state is BreakerState.OPEN:
            left = min(left, self._probe_at - now)
        return None, left

    def remaining_s(self, hold: Hold) -> float:
        """After an outage failure: how long the call may still be held (its hold starts
        now if it had not); Unreachable when that time is up."""
        with self._lock:
            return self._left_s(hold, self._clock())

    def _left_s(self, hold: Hold, now: float) -> float:
        if hold.since is None:
            hold.since, hold.answers = now, self._answers
        left = hold.since + self.max_wait_s - now
        if left <= 0:
            raise Unreachable(self.max_wait_s, self._reason)
        return left

    def answered_since(self, hold: Hold) -> bool:
        """Whether the server answered anyone since the outage first held this call: then
        the call's own failures are its own, not an outage."""
        with self._lock:
            return hold.since is not None and self._answers > hold.answers

    # -- outcomes --------------------------------------------------------------------
    def answered(self) -> None:
        """The server answered: a success, or an error that is not an outage."""
        with self._lock:
            self._answers += 1
            self._failures = 0
            if self._state is BreakerState.CLOSED:
                return
            _log.info(
                "%s answers again after %s; %d held calls go out",
                self.name,
                format_duration(self._clock() - self._opened_at),
                self.held,
            )
            self._state = BreakerState.CLOSED
            self._next_delay_s = self.probe_delay_s
            self._wake()

    def failed(self, probe: bool, reason: str, retry_after_s: float | None = None) -> None:
        """An outage failure: no connection, a timeout, a 5xx."""
        with self._lock:
            self._reason = reason
            if self._state is BreakerState.CLOSED:
                self._failures += 1
                if self._failures < self.failure_threshold:
                    return
                self.opened += 1
                self._opened_at = self._clock()
                _log.warning(
                    "%s is unreachable (%d failures in a row, the last: %s): holding its calls for up to "
                    "%s each, probing it every %s at most",
                    self.name,
                    self._failures,
                    reason,
                    format_duration(self.max_wait_s),
                    format_duration(self.max_probe_delay_s),
                )
            elif not probe:
                return  # a request that left before the breaker opened
            else:
                _log.debug("%s: probe failed (%s)", self.name, reason)
            self._open(retry_after_s)

    def abandon(self, probe: bool) -> None:
        """The probe was never sent (the call stopped): let another call probe at once."""
        if not probe:
            return
        with self._lock:
            if self._state is BreakerState.HALF_OPEN:
                self._state = BreakerState.OPEN
                self._probe_at = self._clock()
                self._wake()

    def _open(self, retry_after_s: float | None) -> None:
        delay = self._next_delay_s if retry_after_s is None else retry_after_s
        self._state = BreakerState.OPEN
        self._probe_at = self._clock() + min(delay, self.max_probe_delay_s)
        self._next_delay_s = min(self._next_delay_s * 2, self.max_probe_delay_s)
        self._wake()  # waiters recompute how long to wait

    def _wake(self) -> None:
        self._changed.notify_all()
        for loop, future in self._waiters:
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:  # that loop is closed; its waiter is gone with it
                pass


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
