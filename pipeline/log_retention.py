"""How long the write-ahead log keeps a request: the pipeline marks when one is done with.

The log itself (records, segments, fsync) is `extensions/write_ahead_log.py`; this is
the pipeline's side of it, which knows traces and sessions.

A trace's spans are done with in the log once every exporter is done with the trace,
except while the session it was scored in is open: then they stay, marked exported, so
a crash can rebuild the session (they are scored again for it, not sent again). The
session's traces are done with once its carrier span is exported, or when it closes
with nothing to carry.

What the shutdown left unscored stays in the log, so the next start scores it: a trace
exported unscored is replayed in full (sent again, scored), and a session whose carrier
left unscored keeps its traces, to be scored again and close over them all.
"""

from __future__ import annotations

from collections.abc import Mapping

from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.extensions.write_ahead_log import WriteAheadLog


class LogRetention:
    """Owned by the pipeline; touched on the collector's event loop only."""

    def __init__(self, log: WriteAheadLog):
        self.log = log
        self._rescore_only: set[bytes] = set()  # replayed traces already exported: scored again, not sent
        self._scored_in: dict[bytes, Session] = {}  # trace id -> the open session it was scored in
        self._carried: dict[bytes, Session] = {}  # carrier trace id -> the session it carries
        self._unscored: set[bytes] = set()  # left unscored by the shutdown: replayed after the next start
        self._unscored_sessions: dict[str, Session] = {}  # closed unscored by the shutdown: rebuilt after it

    def rescore_only(self, trace_ids: set[bytes]) -> None:
        self._rescore_only |= trace_ids

    def replays_for_session(self, trace_id: bytes) -> bool:
        """The replay holds trace `trace_id`, exported before a crash, to score it again for its session."""
        return trace_id in self._rescore_only

    def sent_before(self, trace: Trace) -> bool:
        """`trace` was exported before a crash: it is scored again for its session, not sent."""
        if trace.trace_id in self._rescore_only:
            self._rescore_only.discard(trace.trace_id)
            return True
        return False

    def scored_in(self, trace: Trace, session: Session) -> None:
        self._scored_in[trace.trace_id] = session

    def left_unscored(self, trace: Trace) -> None:
        """The shutdown cut `trace`'s scoring off: once exported it stays, to be scored after the next start."""
        self._unscored.add(trace.trace_id)

    def session_closed(self, session: Session, carrier: Trace | None, scored: bool = True) -> None:
        """Its traces are done with once `carrier` is exported; now, without one; never
        when the shutdown cut its scoring off (the next start rebuilds it)."""
        if not scored:
            self._unscored_sessions[session.session_id] = session
            return
        if carrier is None:
            self._settle(session)
        else:
            self._carried[carrier.trace_id] = session

    def exported(self, trace: Trace, open_sessions: Mapping[str, Session]) -> None:
        """Every exporter is done with `trace`."""
        if trace.late:
            # Late spans, or a re-score's carrier: outside any session, and under the id
            # of the scored trace, whose marks below are its own. The late spans are in
            # the re-score's copy (late_rescores) by now.
            if not trace.undelivered:
                for origin, positions in trace.spans_by_origin.items():
                    if origin.record is not None:
                        self.log.done(origin.record, trace.trace_id, len(positions))
            return
        session = self._scored_in.pop(trace.trace_id, None)
        carried = self._carried.pop(trace.trace_id, None)
        unscored = trace.trace_id in self._unscored
        self._unscored.discard(trace.trace_id)
        # Left in the log: sent again after a restart, scored then when the shutdown left it unscored.
        if trace.undelivered or unscored:
            return
        if carried is not None:  # a session's carrier is out: its traces are done with
            self._settle(carried)
        keep = session is not None and (
            open_sessions.get(session.session_id) is session
            or self._unscored_sessions.get(session.session_id) is session
        )
        for origin, positions in trace.spans_by_origin.items():
            if origin.record is not None:
                if keep and session is not None:
                    self.log.exported(origin.record, trace.trace_id, len(positions))
                    session.unsettled.append((origin.record, trace.trace_id, len(positions)))
                else:
                    self.log.done(origin.record, trace.trace_id, len(positions))

    def _settle(self, session: Session) -> None:
        for record, trace_id, spans in session.unsettled:
            self.log.done(record, trace_id, spans)
        session.unsettled.clear()
