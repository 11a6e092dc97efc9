"""Remembering which keys were already seen, to say something once per key, not per trace.

A condition that holds for every trace of a service (its spans carry no agent content,
its instrumentation does not capture messages) would fill the log at the trace rate if
logged each time; once per service name says the same. The memory is bounded, so a
flood of distinct names cannot grow it: past `limit` names, nothing new is reported.
"""

from __future__ import annotations

from collections.abc import Hashable

DEFAULT_LIMIT = 1024


class FirstSeen:
    """`first(key)` is True the first time `key` is given, False afterwards."""

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.limit = limit
        self._seen: set[Hashable] = set()

    def first(self, key: Hashable) -> bool:
        seen = self._seen
        if key in seen or len(seen) >= self.limit:
            return False
        seen.add(key)
        return True


class SummedCount:
    """Events counted and reported at most once an interval, summed: a condition that
    holds at the trace rate (a bound reached under load) says how often in one line.

    `add(n)` counts; `due(now)` returns the count to report when an interval has passed
    since the last report (and starts the next interval), else 0; `flush()` returns what
    is left, at a stop."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self.total = 0
        self._unreported = 0
        self._reported_at: float | None = None

    def add(self, n: int = 1) -> None:
        self.total += n
        self._unreported += n

    def add_first(self, now: float) -> bool:
        """Count one; True when it is the first ever, which the caller says on its own
        (named): it counts as reported, and the sum of the next ones is due an interval later."""
        self.add()
        if self.total != 1:
            return False
        self.due(now)
        return True

    def due(self, now: float) -> int:
        if not self._unreported or (self._reported_at is not None and now - self._reported_at < self.interval_s):
            return 0
        self._reported_at = now
        return self.flush()

    def flush(self) -> int:
        count, self._unreported = self._unreported, 0
        return count
