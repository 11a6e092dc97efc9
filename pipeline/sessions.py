"""The open sessions: opened by a trace's scoring, closed when idle, over the bound, or at
shutdown, when the session processors run and the carrier span goes to the fan-out.

A session closes after `session_idle` without a new trace, or early when more than
`max_open_sessions` are open (the least recently active first). A session whose trace is
being scored closes once that batch is done, so its processors see every trace. At
shutdown a session not scored by the deadline still sends its carrier, each session
metric skipped with the reason.

With `late_spans: rescore` a closed session is remembered for `late_window`: a trace of
it arriving by then (a new one, or one of its traces scored again with late spans)
opens it again with its earlier traces and the processors' state as it was before it
closed, so its metrics are scored over the whole session when it closes again, on a new
carrier with the next `eval.<metric>.sequence`; at most `max_rescores` times, then a
later trace opens a new session as if none had been. At most `max_open_sessions` closed
sessions are remembered, the one closed first forgotten first (docs/score-encoding.md,
"Re-scores: late traces of a session").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.once import SummedCount
from spanscore.core.quoting import excerpt
from spanscore.core.session import Session, TraceSummary
from spanscore.core.trace import Trace
from spanscore.pipeline.attach import ScoreAttacher
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.fanout import FanOut
from spanscore.pipeline.log_retention import LogRetention
from spanscore.pipeline.scoring import NOT_SCORED, Scored, Scoring

log = logging.getLogger("spanscore.pipeline")

# Closed sessions forgotten for the bound are logged at most this often, summed.
FORGOTTEN_LOG_INTERVAL_S = 60.0


@dataclass
class _Closed:
    session: Session
    state: dict[str, Any]  # the processors' state before its close ran them (they may pop theirs)
    expires: float


class Sessions:
    """Owns the open sessions and the tasks closing them; on the collector's event loop."""

    def __init__(
        self,
        open_sessions: OrderedDict[str, Session],
        idle_s: float,
        max_open: int,
        scoring: Scoring | None,
        attacher: ScoreAttacher,
        fanout: FanOut,
        counts: PipelineCounts,
        clock: Callable[[], float],
        book: LogRetention | None = None,
        late_window: float = 0.0,
        max_rescores: int = 0,
    ):
        self.open = open_sessions  # least recently active first; the fan-out reads it too
        self.idle_s = idle_s
        self.max_open = max_open
        self.scoring = scoring
        self.attacher = attacher
        self.fanout = fanout
        self.counts = counts
        self.clock = clock
        self.book = book
        self._closing: set[asyncio.Task] = set()
        self._why = NOT_SCORED  # what a carrier cut off at shutdown says
        # By session id: carriers that arrived scored (a replayed file, a chained
        # collector) while the session was open here, oldest first; its new carrier
        # replaces them when it closes.
        self._earlier_carriers: dict[str, list[ResourceSpans]] = {}
        # Closed sessions a late trace may open again (none with a window of 0), closed
        # first first; at most `max_open` of them.
        self.late_window = late_window
        self.max_rescores = max_rescores
        self._kept: OrderedDict[str, _Closed] = OrderedDict()
        # Closed sessions dropped for the bound before their window ended.
        self.forgotten = SummedCount(FORGOTTEN_LOG_INTERVAL_S)
        self._stopping = False

    def __len__(self) -> int:
        return len(self.open)

    def open_for(self, trace: Trace, session_id: str) -> Session:
        """The session `trace` belongs to (`session_id`, its), opened if need be, marked active now."""
        now = self.clock()
        session = self.open.get(session_id)
        if session is None:
            session = self._reopen(session_id, now)
            if session is None:
                origin = trace.root_origin or next(iter(trace.spans_by_origin))
                resource = type(origin.resource)()
                resource.CopyFrom(origin.resource)
                session = Session(session_id, resource, now)
            self.open[session_id] = session
            if len(self.open) > self.max_open:
                oldest = next(iter(self.open))
                log.warning(
                    "more than %d open sessions: closing the least recently active (%s) early",
                    self.max_open,
                    excerpt(oldest),
                )
                self.close(oldest)
        session.last_activity = now
        self.open.move_to_end(session_id)
        return session

    def rescored(self, trace: Trace, session_id: str) -> None:
        """`trace`, of session `session_id`, was scored again with late spans: its new
        scores replace its earlier ones in the session, open (marked active) or closed and
        remembered (opened again); a session it is not a trace of is left alone."""
        session = self.open.get(session_id)
        if session is None:
            self._expire(self.clock())
            closed = self._kept.get(session_id)
            session = closed.session if closed is not None else None
        if session is None or not any(t.trace_id == trace.trace_id for t in session.traces):
            return
        self.open_for(trace, session_id).replace_trace(TraceSummary.of(trace))

    @property
    def remembered(self) -> list[str]:
        """Ids of the closed sessions a late trace would open again, closed first first."""
        self._expire(self.clock())
        return list(self._kept)

    def _reopen(self, session_id: str, now: float) -> Session | None:
        self._expire(now)
        closed = self._kept.pop(session_id, None)
        if closed is None:
            return None
        session = closed.session.reopened(closed.state, now)
        log.debug(
            "session %s opened again by a late trace: its metrics are scored again over its traces when it "
            "closes (sequence %d)",
            excerpt(session_id),
            session.sequence,
        )
        return session

    def _remember(self, session: Session) -> None:
        """Keep a closing session for a late trace of it to open again, within `late_window`."""
        if self.late_window <= 0 or self._stopping or session.cut_off:
            return
        if session.sequence > self.max_rescores:
            log.info(
                "session %s scored again %d times (max_rescores): a later trace of it opens a new session",
                excerpt(session.session_id),
                self.max_rescores,
            )
            return
        now = self.clock()
        self._expire(now)
        self._kept[session.session_id] = _Closed(session, dict(session.state), now + self.late_window)
        while len(self._kept) > self.max_open:
            session_id, _ = self._kept.popitem(last=False)
            if self.forgotten.add_first(now):
                log.warning(
                    "more than %d closed sessions kept for late traces (max_open_sessions): session %s is forgotten, "
                    "a late trace of it opens a new session (later ones are counted once a minute)",
                    self.max_open,
                    excerpt(session_id),
                )
        count = self.forgotten.due(now)
        if count:
            log.warning(
                "%d more closed sessions forgotten for max_open_sessions (%d): late traces of them open new sessions",
                count,
                self.max_open,
            )

    def _expire(self, now: float) -> None:
        while self._kept:
            closed = next(iter(self._kept.values()))
            if closed.expires > now:
                break
            self._kept.popitem(last=False)

    def hold_earlier_carrier(self, carrier: Trace) -> Session | None:
        """Keep a session carrier that arrived scored for the session's own carrier to
        replace, when the session is open here with a trace scored: that session; None
        (forward it) when not."""
        session_id, root, origin = carrier.session_id, carrier.root, carrier.root_origin
        session = self.open.get(session_id) if session_id is not None else None
        if session is None or not session.traces or root is None or origin is None:
            return None
        kept = ResourceSpans(schema_url=origin.resource_spans.schema_url)
        kept.resource.CopyFrom(origin.resource)
        scope_spans = kept.scope_spans.add(schema_url=origin.scope_spans.schema_url)
        scope_spans.scope.CopyFrom(origin.scope_spans.scope)
        scope_spans.spans.add().CopyFrom(root)
        self._earlier_carriers.setdefault(session.session_id, []).append(kept)
        return session

    def close_idle(self, now: float) -> None:
        idle_before = now - self.idle_s
        while self.open:
            session_id, session = next(iter(self.open.items()))
            if session.last_activity > idle_before:
                break
            self.close(session_id)

    def close(self, session_id: str) -> None:
        session = self.open.pop(session_id)
        if session.scoring:  # closes once the batch scoring its trace is done
            session.close_pending = True
        else:
            self._spawn_close(session)

    def scored(self, session: Session) -> None:
        """The batch scoring one of the session's traces is done."""
        session.scoring = False
        if session.close_pending:
            self._spawn_close(session)

    async def close_all(self, deadline: float, why: str) -> None:
        """Close every session by `deadline`; those not scored by then skip their metrics with `why`."""
        self._why = why
        self._stopping = True  # nothing closed from now on is opened again
        self._kept.clear()
        await self.wait(deadline)
        for session_id in list(self.open):
            self.close(session_id)
        await self.wait(deadline)

    async def wait(self, deadline: float | None = None) -> None:
        """Until the sessions closing now are done; past `deadline` they are cut off."""
        while self._closing:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                # A close spawned just now first runs up to its scoring: cancelled before it
                # starts, it would send no carrier at all.
                await asyncio.sleep(0)
                cut_off = [task for task in self._closing if not task.done()]
                if cut_off:
                    log.warning(
                        "%d sessions not scored by the shutdown's scoring deadline send their carriers unscored (%s)",
                        len(cut_off),
                        self._why,
                    )
                for task in cut_off:
                    task.cancel()
                await asyncio.gather(*self._closing, return_exceptions=True)
                return
            await asyncio.wait(list(self._closing), timeout=remaining)

    async def _close(self, session: Session) -> None:
        scoring = self.scoring
        if scoring is None:
            raise RuntimeError("sessions are opened by scoring their traces, and this pipeline scores none")
        scored: Scored | None = None
        start_ns = time.time_ns()
        try:
            if session.cut_off:  # its metrics would read traces the shutdown left unscored
                scored = Scored.skipped(scoring.session_metric_names, self._why)
            elif session.traces:  # else none of its traces was scored: nothing to close on
                try:
                    scored = await scoring.score_session(session)
                except asyncio.CancelledError:  # cut off at shutdown
                    scored = Scored.skipped(scoring.session_metric_names, self._why)
                    raise
        finally:
            earlier = self._earlier_carriers.pop(session.session_id, ())
            carrier = self.attacher.carrier(session, scored, start_ns, earlier)
            if self.book is not None:
                self.book.session_closed(session, carrier, scored=scored is None or not scored.cut_off)
            if carrier is not None:
                if (span := carrier.anchor) is not None:
                    session.carrier_span = (carrier.trace_id, span.span_id)
                self.counts.held_spans += 1
                self.fanout.export(carrier)

    def _spawn_close(self, session: Session) -> None:
        self._remember(session)  # before its processors run: they may take their state
        task = asyncio.create_task(self._close(session))
        self._closing.add(task)
        task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scoring task failed", exc_info=task.exception())
