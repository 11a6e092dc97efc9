"""Ready traces waiting to be scored, handed out in batches that keep sessions in order.

Scoring a batch at once lets CPU-bound processors embed all its texts in one call and
pays the event loop's per-task costs once per batch instead of once per trace. A
session has at most one trace out at a time (waiting in a batch or being scored); its
next traces are held back, in their order, until the scorer releases the session. So
a session's traces are scored one at a time in the order they became ready, while
traces of other sessions overlap (across batches as well as within one), and taking a
batch never scans past traces it cannot take. A session's next trace, once released,
goes first in line, so a backlog does not space its turns out.

Getters wait on futures of their own: a new trace wakes one idle getter, which wakes the
next if it left traces behind, so an idle pool of getters costs nothing per trace.

Each trace is stamped with when it was put: `overdue` names, once each, those still
waiting past a time (the scheduler lets them leave at `max_hold` while they wait), and
`remove` takes one out of line (its session's next trace then goes first).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from spanscore.core.trace import Trace


class ReadyQueue:
    def __init__(
        self,
        batch_size: int,
        max_out: int | None = None,
        ordered_sessions: bool = True,
        clock: Callable[[], float] | None = None,
    ):
        """`max_out`: traces handed out and not yet done, at most (None: no bound);
        `ordered_sessions`: keep each session's traces in order, one out at a time (off
        when sessions are not tracked: traces then need no order among themselves);
        `clock`: what each trace is stamped with when put (none: not stamped)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_out is not None and max_out < 1:
            raise ValueError(f"max_out must be at least 1, got {max_out}")
        self.batch_size = batch_size
        self.max_out = max_out
        self.ordered_sessions = ordered_sessions
        self._taken = 0  # handed out in batches, not yet done
        self._free: deque[Trace] = deque()  # can be taken now
        self._held: dict[str, deque[Trace]] = {}  # by session: waiting for its trace that is out
        self._out: set[str] = set()  # sessions with a trace free or being scored
        self._getters: deque[asyncio.Future] = deque()
        self._unfinished = 0  # put and not yet marked done
        self._finished = asyncio.Event()
        self._finished.set()
        self.clock = clock
        # When each trace was put, in that order, until it is overdue: numbers, not the
        # traces, so a trace scored meanwhile is not kept alive by it.
        self._arrivals: deque[tuple[float, int, int]] = deque()  # (time, number, id())
        # By id(): (number, trace, when put) of the traces free or held.
        self._waiting: dict[int, tuple[int, Trace, float]] = {}
        self._number = 0
        self._out_since: dict[int, float] = {}  # by id(): when each trace out in a batch was put

    def __len__(self) -> int:
        return len(self._free) + sum(len(held) for held in self._held.values())

    def put(self, trace: Trace) -> None:
        self._unfinished += 1
        self._finished.clear()
        self._number += 1
        put_at = self.clock() if self.clock is not None else 0.0
        self._waiting[id(trace)] = (self._number, trace, put_at)
        if self.clock is not None:
            self._arrivals.append((put_at, self._number, id(trace)))
        session_id = trace.session_id if self.ordered_sessions else None
        if session_id is not None:
            if session_id in self._out:
                self._held.setdefault(session_id, deque()).append(trace)
                return
            self._out.add(session_id)
        self._free.append(trace)
        self.wake()

    def release(self, trace: Trace) -> None:
        """The scorer is done with `trace`: its session's next trace may go."""
        session_id = trace.session_id if self.ordered_sessions else None
        if session_id is None:
            return
        held = self._held.get(session_id)
        if held:
            # First in line: it was ready before most of what waits (it came in with the
            # trace just scored, or soon after), and behind a backlog longer than
            # `session_idle` its session would close between its turns.
            self._free.appendleft(held.popleft())
            if not held:
                del self._held[session_id]
            self.wake()
        else:
            self._out.discard(session_id)

    def wake(self) -> None:
        """Let an idle getter look for a batch."""
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    async def get_batch(self) -> list[Trace]:
        """The next batch (distinct sessions), waiting until there is one and room under
        `max_out`. The scorer `release`s each trace once scored and marks the batch `done`."""
        free = self._free
        while not free or self._room() == 0:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled():  # woken, then cancelled: pass it on
                    self.wake()
                raise
        batch = [free.popleft() for _ in range(min(len(free), self.batch_size, self._room()))]
        for trace in batch:
            self._out_since[id(trace)] = self._waiting.pop(id(trace))[2]
        self._taken += len(batch)
        if free and self._room():
            self.wake()
        return batch

    def done(self, batch: list[Trace]) -> None:
        """The scorer is done with a batch it got."""
        self._taken -= len(batch)
        for trace in batch:
            self._out_since.pop(id(trace), None)
        self._finish(len(batch))
        if self._free:
            self.wake()

    def ready_at(self, trace: Trace) -> float | None:
        """When a trace out in a batch was put, if the queue has a clock."""
        return self._out_since.get(id(trace)) if self.clock is not None else None

    def overdue(self, put_before: float) -> list[Trace]:
        """The traces still waiting that were put before `put_before`, in the order put;
        each is named once (a trace named stays in line until taken or removed)."""
        arrivals, named = self._arrivals, []
        while arrivals and arrivals[0][0] < put_before:
            _, number, trace_id = arrivals.popleft()
            waiting = self._waiting.get(trace_id)
            if waiting is not None and waiting[0] == number:
                named.append(waiting[1])
        return named

    def remove(self, trace: Trace) -> bool:
        """Take a waiting trace out of line, marked done; False when it is not waiting."""
        if self._waiting.pop(id(trace), None) is None:
            return False
        session_id = trace.session_id if self.ordered_sessions else None
        if session_id is not None and trace in self._held.get(session_id, ()):
            held = self._held[session_id]
            held.remove(trace)
            if not held:
                del self._held[session_id]
        else:
            self._free.remove(trace)
            self.release(trace)  # its session's next trace goes first
        self._finish(1)
        return True

    def _room(self) -> int:
        return self.batch_size if self.max_out is None else self.max_out - self._taken

    def _finish(self, count: int) -> None:
        self._unfinished -= count
        if self._unfinished <= 0:
            self._unfinished = 0
            self._finished.set()

    @property
    def unfinished(self) -> int:
        """Traces put and not yet marked done: waiting, or out in a batch."""
        return self._unfinished

    async def join(self) -> None:
        """Until every trace put so far has been marked done."""
        await self._finished.wait()

    def take_all(self) -> list[Trace]:
        """Every waiting trace, marked done (for exporting them unscored)."""
        traces = list(self._free)
        for held in self._held.values():
            traces.extend(held)
        self._free.clear()
        self._held.clear()
        self._out.clear()
        self._waiting.clear()
        self._arrivals.clear()
        self._finish(len(traces))
        return traces
