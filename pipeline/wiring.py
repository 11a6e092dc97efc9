"""The traces pipeline, wired from its stages in the data's order:

    intake (receive -> write-ahead -> assemble) -> scheduler (ready traces, sessions in
    order) -> scoring (here or in worker processes) -> attach -> fan-out to exporters

Receivers call the intake with each parsed request. A timer releases ready traces from
the assembler; each trace in the scoring scope is scored (traces of one session in
order), gets its scores attached, and goes to every exporter the score router names
(all of them without a router). Traces outside the scope skip scoring and sessions and
are exported exactly as received. Sessions close after `session_idle` without a new
trace, or at shutdown, when session processors run and the `evaluate_session` carrier
span is exported.

Every received span counts as held until all exporters are done with it; when
`max_buffered_spans` are held, the intake raises `ConsumerFull` and receivers tell the
client to retry later. Nothing is dropped silently: a span leaves through an exporter or
is logged as dropped by it (only when the backend refuses it for good or stays down
past the retry budget).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from spanscore.core.routing import TraceRouter
from spanscore.core.session import Session
from spanscore.core.telemetry import Readout, reported
from spanscore.core.trace_exporter import ReadsProvenance, TraceExporter, exporter_telemetry
from spanscore.exporters.evaluation_logs import EvaluationLogs
from spanscore.exporters.score_metrics import ScoreMetrics
from spanscore.extensions.pending_copies import PendingCopy
from spanscore.extensions.rescore_copies import KeptCopy, RescoreCopies
from spanscore.extensions.write_ahead_log import WriteAheadLog
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.attach import ScoreAttacher
from spanscore.pipeline.counts import PipelineCounts
from spanscore.pipeline.fanout import FanOut
from spanscore.pipeline.intake import Intake
from spanscore.pipeline.late_rescores import LateRescores
from spanscore.pipeline.log_retention import LogRetention
from spanscore.pipeline.scheduler import Scheduler
from spanscore.pipeline.score_scope import ScoreScope
from spanscore.pipeline.scoring import NOT_SCORED, LocalScoring, Scoring
from spanscore.pipeline.sessions import Sessions
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.base import Processor

if TYPE_CHECKING:
    from spanscore.pipeline.scoring_workers import WorkerScoring

log = logging.getLogger("spanscore.pipeline")


class Pipeline:
    """The stages of one traces pipeline; the intake is what receivers consume into."""

    def __init__(
        self,
        assembler: Assembler,
        processors: list[tuple[str, Processor]],
        exporters: list[TraceExporter],
        clock: Callable[[], float] = time.monotonic,
        score_metrics: ScoreMetrics | None = None,
        span_events: bool = True,
        evaluation_logs: EvaluationLogs | None = None,
        workers: WorkerScoring | None = None,
        write_ahead: WriteAheadLog | None = None,
        router: TraceRouter | None = None,
    ):
        config = assembler.config
        self.assembler = assembler
        self.processors = processors  # those running in this process
        self.exporters = exporters
        self.workers = workers
        self.write_ahead = write_ahead
        self.clock = clock
        self.counts = PipelineCounts(config.max_buffered_spans)
        book = LogRetention(write_ahead) if write_ahead is not None else None
        # Scoring runs here, or in worker processes (`scoring_workers`) that run the
        # same processors on copies of the traces and hand their outputs back.
        self.scoring: Scoring | None = workers or (
            LocalScoring(processors, ScoreScope(config.score)) if processors else None
        )
        late = late_rescores(config, self.scoring, write_ahead.copies if write_ahead is not None else None)
        # Workers and re-scores take spans as they arrived: sliced, not serialized again.
        keep_wire = workers is not None or late is not None
        self.intake = Intake(assembler, self.counts, clock, book, keep_wire=keep_wire)
        self.attacher = ScoreAttacher(self.counts, clock, span_events, score_metrics, evaluation_logs)
        if workers is not None:
            workers.on_observations = self.attacher.observe
        open_sessions: OrderedDict[str, Session] = OrderedDict()
        self.fanout = FanOut(exporters, self.counts, router, book, open_sessions)
        self.sessions = Sessions(
            open_sessions,
            config.session_idle,
            config.max_open_sessions,
            self.scoring,
            self.attacher,
            self.fanout,
            self.counts,
            clock,
            book,
            # A late trace of a closed session opens it again where a late span re-scores its trace.
            late_window=config.late_window if reopens_sessions(late, self.scoring) else 0.0,
            max_rescores=config.max_rescores,
        )
        self.late = late
        self.scheduler = Scheduler(
            assembler,
            self.scoring,
            self.attacher,
            self.fanout,
            self.sessions,
            self.counts,
            clock,
            book,
            self.late,
            write_ahead.pending if write_ahead is not None else None,
        )

    def telemetry(self) -> list[Readout]:
        """spanscore's own metrics, as the pipeline's stages and components report them."""
        exporters = [readout for exporter in self.exporters for readout in exporter_telemetry(exporter)]
        return [*reported([self.counts, self.intake]), *exporters, *reported([self.scoring, self.write_ahead])]

    def restore_late(self, kept: list[KeptCopy]) -> None:
        """Take back the scored traces awaiting late spans at the last stop (file_storage's
        copies), after the write-ahead log's replay: late spans of them re-score them."""
        if self.late is None:
            copies = self.write_ahead.copies if self.write_ahead is not None else None
            if copies is not None and kept:  # late spans are not re-scored now: nothing to keep
                copies.compact([])
            return
        self.assembler.forwarded(self.late.restore(kept, self.clock()))

    def restore_pending(self, pending: list[PendingCopy]) -> None:
        """Score again the traces whose results were still to follow at the last stop
        (file_storage's copies): those results follow now."""
        self.scheduler.restore_pending(pending)

    async def start(self) -> None:
        """Start scoring and releasing; the processors and exporters are already started."""
        if self.scoring is not None:
            self.attacher.provenance = self.scoring.provenance()
            for exporter in self.exporters:
                if isinstance(exporter, ReadsProvenance):
                    exporter.read_provenance(self.attacher.provenance)
        self.scheduler.start()

    def tick(self) -> None:
        """Release ready traces and close idle sessions as of now (the timer does it too)."""
        self.scheduler.tick()

    async def settle(self) -> None:
        """Until every trace released so far is scored and handed to the exporters, and
        every closing session is done (for tests and embedders driving `tick`)."""
        await self.scheduler.settle()

    async def drain(self, deadline: float, why: str = NOT_SCORED) -> None:
        """Release every buffered trace and close every session, handing all to the exporters.

        Called once receivers stopped; by `deadline` what could not be scored is handed
        over unscored, its metrics skipped with `why` (`eval.<metric>.skipped`). The
        exporters flush when they are shut down afterwards.
        """
        await self.scheduler.drain(deadline, why)


def late_rescores(
    config: PipelineSettings, scoring: Scoring | None, copies: RescoreCopies | None = None
) -> LateRescores | None:
    """What re-scores traces with their late spans, when `late_spans: rescore` and there
    is scoring. With `copies` (file_storage) the copies it keeps are on disk too."""
    if config.late_spans != "rescore" or scoring is None:
        return None
    return LateRescores(config, copies)


def reopens_sessions(late: LateRescores | None, scoring: Scoring | None) -> bool:
    """Whether a late trace of a closed session opens it again: with late re-scores, when
    the processors run in this process. In scoring workers the processors' state of a
    closed session is the worker's, which does not keep it."""
    if late is None:
        return False
    if not isinstance(scoring, LocalScoring):
        log.info("closed sessions are not opened again by late traces when scoring runs in scoring_workers")
        return False
    return True
