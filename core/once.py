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
