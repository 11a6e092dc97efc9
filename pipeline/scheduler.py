"""The scheduler: ready traces to the scoring stage, sessions in order, then onward.

A timer releases ready traces from the assembler. Traces in the scoring scope wait in a
ready queue for scorers, which take them in batches of up to `scoring_batch` (one trace
per session at a time, so a session's traces are scored in the order they were ready),
at most `scoring_concurrency` traces out at once: waiting costs no task per trace, and
CPU-bound metrics cannot keep the receivers and exporters that share the event loop
waiting. Each scored trace gets its scores attached and goes to the fan-out; scoring
never holds a trace back, even a crashed or cancelled scoring exports its traces. A
trace ready `max_hold` ago leaves with the results computed by then, whether its
scoring is running (its scorer then takes the next batch) or it still waits for a
scorer (it stays in line); the others follow on `evaluate_trace` carriers when its
scoring ends. At most `max_following_traces` traces have results still to follow: past
it the oldest is given up, its pending metrics following as skipped, so a judge that
never answers costs bounded memory. With file_storage a trace that leaves with results
to follow is kept on disk until they followed (extensions/pending_copies), so a restart
scores it again and they still follow (`restore_pending`). Late
spans of a scored trace are forwarded and, with `late_spans: rescore`, the trace is
scored again with them (late_rescores): only the re-score's carrier span is exported.

At shutdown scoring has until a deadline: past it the traces being scored and those
still waiting leave unscored, every trace metric skipped with the reason, and so do the
carriers of the sessions still closing; results still to follow a trace that left are
left to the next start when they are on disk.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from spanscore.core.durations import format_duration
from spanscore.core.once import SummedCount
from spanscore.core.score_encoding import result_keys
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.extensions.pending_copies import PendingCopies, PendingCopy
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.attach import ScoreAttacher
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.encoded_trace import origins_request, request_origins
from spanscore.pipeline.fanout import FanOut
from spanscore.pipeline.late_rescores import LateRescores
from spanscore.pipeline.log_retention import LogRetention
from spanscore.pipeline.ready_queue import ReadyQueue
from spanscore.pipeline.score_scope import SESSION_CARRIER, UnscoredTraces
from spanscore.pipeline.scoring import (
    NOT_SCORED,
    Scored,
    Scoring,
    ScoringProgress,
    following_results,
    skipped_attributes,
)
from spanscore.pipeline.sessions import Sessions
from spanscore.pipeline.worker_messages import received_trace, trace_origins

log = logging.getLogger("spanscore.pipeline")

MAX_TICK_S = 0.1
MIN_TICK_S = 0.005
# When traces take all the scoring time at shutdown (a judge that does not answer), the
# sessions closing after them still get this long (at most half the time left).
SESSION_SHARE_S = 1.0
# Traces left unscored between yields to the event loop at shutdown: deciding the scope
# may normalize each, and meanwhile the exporters send what was handed over already.
UNSCORED_CHUNK = 64
# Traces given up past `max_following_traces` are logged at most this often, summed.
GIVEN_UP_LOG_INTERVAL_S = 60.0


@dataclass
class Following:
    """A trace that left for the exporters before its scoring ended, and what it left with."""

    trace: Trace
    left_with: Scored
    pending: tuple[str, ...]  # the trace metrics whose results follow
    batch: asyncio.Task | None = None  # its scoring, once a scorer took it (None: it waits in line)


class Scheduler:
    """Owns the ready queue and the scoring tasks; on the collector's event loop."""

    def __init__(
        self,
        assembler: Assembler,
        scoring: Scoring | None,
        attacher: ScoreAttacher,
        fanout: FanOut,
        sessions: Sessions,
        counts: PipelineCounts,
        clock: Callable[[], float],
        book: LogRetention | None = None,
        late: LateRescores | None = None,
        pending_copies: PendingCopies | None = None,
    ):
        config = assembler.config
        self.assembler = assembler
        self.scoring = scoring
        self.attacher = attacher
        self.fanout = fanout
        self.sessions = sessions
        self.counts = counts
        self.clock = clock
        self.book = book
        self.concurrency = config.scoring_concurrency
        self.tracks_sessions = scoring is not None and scoring.tracks_sessions
        self.ready = ReadyQueue(
            config.scoring_batch,
            max_out=config.scoring_concurrency,
            ordered_sessions=self.tracks_sessions,
            clock=clock,
        )
        self._scorers: list[asyncio.Task] = []
        self._ticker: asyncio.Task | None = None
        self._unscored = UnscoredTraces()
        self._why = NOT_SCORED  # what a trace skipped at shutdown says
        self._replaced: set[bytes] = set()  # ids of earlier carriers the sessions hold, not to export
        self.late = late  # scored traces awaiting late spans, when they are scored again
        self._rescore_carriers: dict[int, Trace] = {}  # by id() of the re-scored trace: what it sends
        self.max_hold = config.max_hold
        # Batches being scored, some of whose traces may have left, and their traces.
        self._batches: dict[asyncio.Task, list[Trace]] = {}
        self._started: set[asyncio.Task] = set()  # those whose scoring began (a cancel reaches their cleanup)
        # By id() of the trace, oldest first: those whose results are still to follow.
        self._following: dict[int, Following] = {}
        self.max_following = config.max_following_traces
        # Batches cancelled past the bound: why, and their traces' results that were following.
        self._given_up: dict[asyncio.Task, tuple[str, dict[int, Following]]] = {}
        self._given_up_count = SummedCount(GIVEN_UP_LOG_INTERVAL_S)
        # With file_storage: the traces that left with results to follow, on disk until
        # those followed, so that a restart scores them again (restore_pending).
        self.pending_copies = pending_copies
        self._kept_for_restart = 0  # following traces left to the next start at shutdown
        # Of those taken back at start, the ones the log's replay scores again for their
        # session (log_retention): by trace id, their pending metrics, until dispatched.
        self._replayed_pending: dict[bytes, tuple[str, ...]] = {}

    def start(self) -> None:
        if self.scoring is not None:
            self._scorers = [
                asyncio.create_task(self._score_forever(self.scoring), name=f"scoring-{i}")
                for i in range(self.concurrency)
            ]
        self._ticker = asyncio.create_task(self._tick_forever(), name="pipeline-ticker")

    # Readiness -------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        wait_s = self.assembler.config.trace_wait
        while True:
            try:
                self.tick()
            except Exception:
                log.exception("pipeline tick failed")
            deadline = self.assembler.next_deadline()
            sleep_s = MAX_TICK_S if deadline is None else deadline - self.clock()
            await asyncio.sleep(min(max(sleep_s, MIN_TICK_S), MAX_TICK_S, max(wait_s, MIN_TICK_S)))

    def tick(self) -> None:
        """Release ready traces, let those waiting for a scorer since `max_hold` leave,
        and close idle sessions, as of now."""
        now = self.clock()
        for trace in self.assembler.pop_ready(now):
            self.dispatch(trace)
        self._leave_waiting(now)
        self.sessions.close_idle(now)
        self._log_given_up(now)

    def dispatch(self, trace: Trace) -> None:
        if trace.late or self.scoring is None:
            # Late spans are sent as they came; the trace they complete is scored again.
            rescore = self.late.rescore_of(trace, self.clock()) if trace.late and self.late is not None else None
            self.fanout.export(trace)
            if rescore is not None:
                self.ready.put(rescore)
        else:
            pending = self._replayed_pending.pop(trace.trace_id, None) if self._replayed_pending else None
            if pending is not None:
                # Sent before a crash, scored again for its session: only its pending results follow.
                self.fanout.export(trace)  # nothing is sent: its spans are released
                self._following[id(trace)] = Following(trace, Scored(), pending)
            if self.late is not None:  # its spans as they are scored: late spans may come while it is
                self.late.remember(trace, self.clock())
            # Whether it is scored, and its session, are settled by a scorer: the scope may
            # need the normalized view, whose cost belongs off the release tick.
            self.ready.put(trace)

    # Scoring ---------------------------------------------------------------------------

    async def _score_forever(self, scoring: Scoring) -> None:
        ready = self.ready
        while True:
            batch = await ready.get_batch()
            # The batch's traces leave within max_hold; a scoring still running then goes
            # on beside the scorers, its remaining results to follow on carriers.
            left = asyncio.Event()
            task = asyncio.create_task(self._score_batch(scoring, batch, left), name="scoring-batch")
            for trace in batch:  # those that left while waiting for a scorer
                following = self._following.get(id(trace))
                if following is not None:
                    following.batch = task
            self._batches[task] = batch
            task.add_done_callback(self._batch_done)
            waiting = asyncio.ensure_future(left.wait())
            try:
                await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
            finally:
                waiting.cancel()
                ready.done(batch)
            # A processor that never suspends (an inline embedder) and a backlog in the
            # queue would otherwise keep the loop from the receivers, the exporters and
            # the ticker until the backlog is gone: clients time out, nothing leaves.
            await asyncio.sleep(0)

    def _batch_done(self, task: asyncio.Task) -> None:
        self._batches.pop(task, None)
        self._started.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scoring a batch failed", exc_info=task.exception())

    async def _score_batch(self, scoring: Scoring, traces: list[Trace], left: asyncio.Event) -> None:
        opened: dict[bytes, Session] = {}
        session_of = self._session_of(opened)
        observations = ScoreObservations()  # the batch's score metrics, recorded once per series
        this = asyncio.current_task()
        assert this is not None
        self._started.add(this)
        _, given_up_early = self._given_up.get(this, ("", {}))  # past the bound before it started
        gone = {id(trace) for trace in traces if id(trace) in self._following or id(trace) in given_up_early}
        progress = ScoringProgress(left=frozenset(gone))
        task = asyncio.ensure_future(scoring.score_batch(traces, session_of, progress))
        try:
            try:
                if given_up_early:
                    raise asyncio.CancelledError
                if scoring.shows_progress:
                    hold = self._hold_left(traces, gone)
                    if hold is not None:
                        done, _ = await asyncio.wait({task}, timeout=hold)
                        if not done and progress.catch_up is not None:
                            await progress.catch_up()
                        if not task.done():
                            self._leave_early(traces, progress, gone, opened)
                    left.set()  # its scorer takes the next batch: this one goes on beside
                answers = await task
            except asyncio.CancelledError:  # the scoring deadline at shutdown, or given up past the bound
                task.cancel()
                given = self._given_up.pop(this, None)
                why, given_up = given if given is not None else (self._why, {})
                for trace in traces:
                    following = self._following.pop(id(trace), None) or given_up.get(id(trace))
                    if following is not None:
                        if given is None and self._keep_for_restart(trace):
                            continue
                        self._follow(trace, Scored(attributes=skipped_attributes(following.pending, why)), observations)
                    elif id(trace) not in gone:
                        self._conclude(trace, scoring.left_unscored(trace, session_of, why), opened)
                raise
            for trace, scored in zip(traces, answers):
                following = self._following.pop(id(trace), None)
                if following is not None:
                    self._follow(trace, following_results(scored, following.left_with, following.pending), observations)
                elif id(trace) not in gone:
                    self._conclude(trace, scored, opened, observations)
        finally:
            self.attacher.observe(observations)
            for session in opened.values():
                self.sessions.scored(session)
            for trace in traces:
                if self._following.pop(id(trace), None) is not None:  # a scoring that failed: nothing follows
                    self._followed(trace)
                trace.release_derived()  # the views derived for the processors are not kept while exporting
                if id(trace) in gone:
                    self._export_carrier(trace)
                else:
                    self._export(trace)
                self.ready.release(trace)  # the next trace of its session, held back until now, may go
            left.set()

    def _hold_left(self, traces: list[Trace], gone: set[int]) -> float | None:
        """How long the batch's scoring may run before its traces still here leave: until
        the first of them was ready `max_hold` ago (at least a tick, for the scoring to
        show its progress); None when all of them left while waiting for a scorer."""
        now = self.clock()
        ready_at = [self.ready.ready_at(trace) for trace in traces if id(trace) not in gone]
        if not ready_at:
            return None
        return max(min(now if at is None else at for at in ready_at) + self.max_hold - now, MIN_TICK_S)

    def _leave_early(
        self, traces: list[Trace], progress: ScoringProgress, gone: set[int], opened: dict[bytes, Session]
    ) -> None:
        """Each trace whose progress is known leaves now: out of the scope as it came, else
        with the results computed so far and `eval.<metric>.pending` for the metrics still
        being computed; the others (scored where progress is not seen) wait for the whole
        scoring."""
        batch = asyncio.current_task()
        for trace in traces:
            so_far = progress.so_far(trace)
            if so_far is None or id(trace) in gone or trace.sequence > 1:  # a re-score sends one carrier, when done
                continue
            gone.add(id(trace))
            if so_far.skip_reason is not None:
                self._conclude(trace, so_far, opened)
                trace.release_derived()
                self._export(trace)
                continue
            session = opened.get(trace.trace_id)
            if self.book is not None and session is not None:
                self.book.scored_in(trace, session)
            # From here `trace.results` are the ones it left with, what the exporters read
            # (the scoring goes on adding to its own list): a processor starting after
            # max_hold reads the results computed by then.
            self._leave(trace, so_far, progress.pending_of(trace), batch)
        self._bound_following()

    def _leave_waiting(self, now: float) -> None:
        """The traces waiting for a scorer since `max_hold` leave: out of the scope as they
        came, else with every trace metric pending; they stay in line to be scored."""
        scoring = self.scoring
        if scoring is None or not scoring.shows_progress:
            return
        for trace in self.ready.overdue(now - self.max_hold):
            # A re-score sends one carrier, when done; a trace taken back at start left already.
            if trace.sequence > 1 or id(trace) in self._following:
                continue
            skip = scoring.skip_reason(trace)
            if skip is not None:
                self.ready.remove(trace)
                self._conclude(trace, Scored(skip_reason=skip), {})
                trace.release_derived()
                self._export(trace)
            else:
                self._leave(trace, Scored(), scoring.trace_metric_names, None)
        self._bound_following()

    def _leave(self, trace: Trace, so_far: Scored, pending: tuple[str, ...], batch: asyncio.Task | None) -> None:
        """`trace` to the exporters with `so_far` and its `pending` metrics said pending."""
        reason = f"not scored within max_hold ({format_duration(self.max_hold)})"
        if self.pending_copies is not None:  # its spans as scored: no score is written on them yet
            self.pending_copies.keep(trace.trace_id, pending, origins_request(trace_origins(trace)))
        so_far.attributes += [SpanAttribute(result_keys(name).pending, reason) for name in pending]
        self.attacher.attach(trace, so_far)
        self.fanout.export(trace)
        self._following[id(trace)] = Following(trace, so_far, pending, batch)

    def _bound_following(self) -> None:
        """Past `max_following_traces` the oldest traces' results are given up: a batch
        being scored is cancelled (its traces' pending metrics follow as skipped), a trace
        still in line leaves the line with its pending metrics skipped."""
        excess = len(self._following) - self.max_following
        if excess <= 0:
            return
        why = f"given up: results of more than {self.max_following} traces were following (max_following_traces)"
        oldest = list(itertools.islice(self._following.values(), excess))
        for following in oldest:
            if id(following.trace) not in self._following:  # given up with its batch
                continue
            self._given_up_count.add()
            batch = following.batch
            if batch is None:
                trace = following.trace
                del self._following[id(trace)]
                self.ready.remove(trace)
                self._follow(trace, Scored(attributes=skipped_attributes(following.pending, why)), None)
                trace.release_derived()
                self._export_carrier(trace)
            else:
                # Its batch's traces are given up with it: out of the count now, their
                # skipped results sent when the cancelled scoring ends.
                siblings = [id(trace) for trace in self._batches.get(batch, ()) if id(trace) in self._following]
                self._given_up_count.add(len(siblings) - 1)
                self._given_up[batch] = (why, {key: self._following.pop(key) for key in siblings})
                if batch in self._started:  # else it gives up as it starts
                    batch.cancel()

    def _log_given_up(self, now: float | None) -> None:
        """What `_bound_following` gave up since the last time, at most once an interval
        (all of it when `now` is None: at the stop)."""
        count = self._given_up_count.flush() if now is None else self._given_up_count.due(now)
        if count:
            log.warning(
                "gave up the results still following %d traces (more than max_following_traces %d traces had "
                "results to follow): their pending metrics follow as skipped",
                count,
                self.max_following,
            )

    def _follow(self, trace: Trace, scored: Scored, observations: ScoreObservations | None) -> None:
        """The results that follow a trace that left before its scoring ended, on a carrier
        numbered with the same sequence: they complete that scoring."""
        self._followed(trace)
        if scored.skip_reason is not None or not (scored.results or scored.attributes):
            return
        carrier = self.attacher.following_carrier(trace, scored, time.time_ns(), observations)
        if carrier is not None:
            self._rescore_carriers[id(trace)] = carrier

    def _followed(self, trace: Trace) -> None:
        """Nothing more follows `trace`: a restart need not score it again."""
        if self.pending_copies is not None:
            self.pending_copies.done(trace.trace_id)

    def _keep_for_restart(self, trace: Trace) -> bool:
        """At shutdown, whether the results following `trace` are left to the next start
        (on disk with file_storage) rather than sent as skipped."""
        if self.pending_copies is None or trace.trace_id not in self.pending_copies:
            return False
        self._kept_for_restart += 1
        return True

    def restore_pending(self, copies: list[PendingCopy]) -> None:
        """The traces whose results were still to follow at the last stop (file_storage),
        back in line to be scored: their spans were sent, so only the results of their
        pending metrics follow, on a carrier with sequence 1, as if they had not stopped.
        One the log replays to score again for its open session is scored once, there."""
        scoring = self.scoring
        names = set(scoring.trace_metric_names) if scoring is not None and scoring.shows_progress else set()
        dropped = 0
        for copy in copies:
            pending = tuple(name for name in copy.pending if name in names)
            if not pending:  # no scoring here now, or none of its metrics: nothing can follow
                dropped += 1
                if self.pending_copies is not None:
                    self.pending_copies.done(copy.trace_id)
                continue
            if self.book is not None and self.book.replays_for_session(copy.trace_id):
                self._replayed_pending[copy.trace_id] = pending  # scored with its session as it is replayed
                continue
            trace = received_trace((copy.trace_id, None, 1, request_origins(copy.spans)))
            self._following[id(trace)] = Following(trace, Scored(), pending)
            self.ready.put(trace)
        if len(copies) > dropped:
            log.info("results still to follow %d traces at the last stop: scoring them again", len(copies) - dropped)
        if dropped:
            log.warning(
                "results still to follow %d traces at the last stop are given up: none of their pending metrics "
                "is scored by this configuration",
                dropped,
            )
        self._bound_following()

    def _session_of(self, opened: dict[bytes, Session]) -> Callable[[Trace], Session | None]:
        """Opens the session of a trace in the scope, marked as being scored, into `opened`."""

        def session_of(trace: Trace) -> Session | None:
            if not (trace.session_id and self.tracks_sessions):
                return None
            session = self.sessions.open_for(trace, trace.session_id)
            session.scoring = True
            opened[trace.trace_id] = session
            return session

        return session_of

    def _conclude(
        self,
        trace: Trace,
        scored: Scored,
        opened: dict[bytes, Session],
        observations: ScoreObservations | None = None,
    ) -> None:
        if self.late is not None and (scored.skip_reason is not None or scored.cut_off):
            self.late.forget(trace.trace_id)  # not scored: nothing to score again
        if trace.sequence > 1:  # a re-score: its spans were sent, its results go on a carrier
            if scored.skip_reason is None and not scored.cut_off:
                trace.results = scored.results  # what its session reads (scored elsewhere: not set here)
                carrier = self.attacher.rescore_carrier(trace, scored, time.time_ns(), observations)
                if carrier is not None:
                    self._rescore_carriers[id(trace)] = carrier
                if self.tracks_sessions and (session_id := self.assembler.session_id_of(trace)):
                    self.sessions.rescored(trace, session_id)  # its session's input changed
            return
        if scored.skip_reason is not None:
            held = self.sessions.hold_earlier_carrier(trace) if scored.skip_reason == SESSION_CARRIER else None
            if held is not None:
                self._replaced.add(trace.trace_id)  # the session's new carrier replaces it when it closes
                if self.book is not None:  # logged until then: a crash rebuilds the session with it
                    self.book.scored_in(trace, held)
                return
            self.counts.unscored_traces += 1
            self._unscored.said(trace, scored.skip_reason)
            return
        session = opened.get(trace.trace_id)
        if self.book is not None:
            if session is not None:
                self.book.scored_in(trace, session)
            if scored.cut_off:
                self.book.left_unscored(trace)
        self.attacher.attach(trace, scored, observations)

    def _export(self, trace: Trace) -> None:
        if trace.sequence > 1:  # a re-score sends its carrier only: no span id is sent twice
            self._export_carrier(trace)
            return
        if self._replaced and trace.trace_id in self._replaced:
            self._replaced.discard(trace.trace_id)
            self.fanout.discard(trace)
        else:
            self.fanout.export(trace)

    def _export_carrier(self, trace: Trace) -> None:
        """The carrier of results for a trace whose spans were sent already, if it has one."""
        carrier = self._rescore_carriers.pop(id(trace), None)
        if carrier is not None:
            self.counts.held_spans += carrier.span_count
            self.fanout.export(carrier)

    # Shutdown --------------------------------------------------------------------------

    async def drain(self, deadline: float, why: str = NOT_SCORED) -> None:
        """Release every held trace and close every session, all by `deadline`; what could
        not be scored by then goes to the exporters unscored, its metrics skipped with `why`."""
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        self._why = why
        for trace in self.assembler.pop_all():
            self.dispatch(trace)
        share = min(SESSION_SHARE_S, max(0.0, deadline - time.monotonic()) / 2)
        await self._drain_ready(deadline - share)
        await self._drain_following(deadline - share)
        await self.sessions.close_all(deadline, why)
        self._log_given_up(None)  # what the last interval gave up
        if self._kept_for_restart:
            log.warning(
                "results still to follow %d traces are kept in file_storage: they are scored again and follow "
                "after the next start",
                self._kept_for_restart,
            )
        for scorer in self._scorers:
            scorer.cancel()
        await asyncio.gather(*self._scorers, return_exceptions=True)

    async def settle(self) -> None:
        """Until every trace released so far is scored and handed to the exporters, and
        every closing session is done (for tests and embedders driving `tick`)."""
        if self._scorers:
            await self.ready.join()
        while self._batches:  # the results following traces that left early
            await asyncio.gather(*self._batches, return_exceptions=True)
        await self.sessions.wait()

    async def _drain_following(self, deadline: float) -> None:
        """The scorings of traces that left early, until `deadline`; past it their pending
        metrics follow as skipped, saying why."""
        remaining = deadline - time.monotonic()
        if self._batches and remaining > 0:
            await asyncio.wait(set(self._batches), timeout=remaining)
        for task in self._batches:
            task.cancel()
        await asyncio.gather(*self._batches, return_exceptions=True)

    async def _drain_ready(self, deadline: float) -> None:
        ready = self.ready
        remaining = deadline - time.monotonic()
        if remaining > 0:
            try:
                await asyncio.wait_for(ready.join(), remaining)
            except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                pass
        if not ready.unfinished or self.scoring is None:  # without scoring nothing waits for it
            return
        # Those in line that left already (max_hold) are not said here: their pending
        # results follow as skipped, or are kept for the next start.
        waiting = len(ready) - sum(1 for following in self._following.values() if following.batch is None)
        if ready.unfinished > len(ready) or waiting:
            log.warning(
                "scoring stopped at the shutdown's scoring deadline: %d traces being scored and %d waiting leave "
                "unscored (%s)",
                ready.unfinished - len(ready),
                waiting,
                self._why,
            )
        for scorer in self._scorers:
            scorer.cancel()  # a cancelled scoring still exports its traces, its metrics skipped
        await asyncio.gather(*self._scorers, return_exceptions=True)
        for count, trace in enumerate(ready.take_all(), 1):
            trace.release_derived()
            following = self._following.pop(id(trace), None)
            if following is not None:  # it left while waiting: its pending metrics follow as skipped
                if self._keep_for_restart(trace):
                    continue
                self._follow(trace, Scored(attributes=skipped_attributes(following.pending, self._why)), None)
                self._export_carrier(trace)
                continue
            opened: dict[bytes, Session] = {}
            self._conclude(trace, self.scoring.left_unscored(trace, self._session_of(opened), self._why), opened)
            for session in opened.values():
                self.sessions.scored(session)
            self._export(trace)
            if count % UNSCORED_CHUNK == 0:
                await asyncio.sleep(0)
