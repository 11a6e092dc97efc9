"""The pipeline between an in-memory receiver and in-memory exporters, on a hand-held clock.

`rig_for` is a fixture; a conftest makes it available with
`from tests.support.pipeline_rig import rig_for`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spanscore.exporters.memory import MemoryExporter
from spanscore.extensions.pending_copies import PendingCopies
from spanscore.extensions.rescore_copies import RescoreCopies
from spanscore.extensions.write_ahead_log import WriteAheadLog
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.scoring_workers import WorkerScoring, WorkerSetup
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.base import Processor
from spanscore.receivers.memory import MemoryReceiver
from tests.support.toy_metric import FACTORY as TOY_FACTORY
from tests.support.toy_metric import ToyMetric


class Clock:
    """Monotonic seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    clock: Clock
    pipeline: Pipeline
    receiver: MemoryReceiver
    exporter: MemoryExporter
    workers: WorkerScoring | None = None  # with `scoring_workers`: the worker processes, shut down after the rig
    log: WriteAheadLog | None = None  # with `storage`: file_storage's files, closed after the rig

    async def at(self, now: float) -> None:
        """Set the clock, release what is due and wait until it reached the exporters."""
        self.clock.now = now
        self.pipeline.tick()
        await self.pipeline.settle()

    async def drain(self) -> None:
        await self.pipeline.drain(time.monotonic() + 5.0)


@pytest.fixture
async def rig_for():
    """Factory: rig_for(*processors, exporters=..., **assembler settings) -> a started Rig
    (with `scoring_workers=N`, toy metrics scored in N worker processes; with `storage`,
    a directory, started on its files as `file_storage` does: replayed, then restored)."""
    rigs: list[Rig] = []

    async def build(
        *processors: Processor,
        exporters: list[MemoryExporter] | None = None,
        span_events: bool = True,
        storage: Path | None = None,
        **settings,
    ) -> Rig:
        clock = Clock()
        config = PipelineSettings(**{"trace_wait": 1.0, "trace_timeout": 30.0, "session_idle": 60.0, **settings})
        exporters = exporters or [MemoryExporter()]
        named = [(f"processor/{i}", p) for i, p in enumerate(processors)]
        workers = await _workers(config, named, span_events) if config.scoring_workers else None
        log = (
            None
            if storage is None
            else WriteAheadLog(storage, copies=RescoreCopies(storage), pending=PendingCopies(storage))
        )
        pipeline = Pipeline(
            Assembler(config),
            named if workers is None else [],
            exporters,
            clock=clock,
            span_events=span_events,
            workers=workers,
            write_ahead=log,
        )
        await pipeline.start()
        if log is not None and log.copies is not None and log.pending is not None:
            pipeline.intake.replay(log.open())
            pipeline.restore_late(log.copies.open())
            pipeline.restore_pending(log.pending.open())
        rig = Rig(clock, pipeline, MemoryReceiver(pipeline.intake), exporters[0], workers, log)
        rigs.append(rig)
        return rig

    yield build
    for rig in rigs:
        await rig.drain()
        for exporter in rig.pipeline.exporters:
            await exporter.shutdown(time.monotonic() + 5.0)
        if rig.workers is not None:
            await rig.workers.shutdown(time.monotonic() + 5.0)
        if rig.log is not None:
            rig.log.close()


async def _workers(
    config: PipelineSettings, processors: list[tuple[str, Processor]], span_events: bool
) -> WorkerScoring:
    """`scoring_workers` worker processes running the same toy metrics (only those: a
    worker builds its processors from their factory and config)."""
    toys = [(component_id, p) for component_id, p in processors if isinstance(p, ToyMetric)]
    if len(toys) < len(processors):
        raise TypeError("the rig's scoring workers run toy metrics only")
    setup = WorkerSetup(
        [(component_id, TOY_FACTORY, p.config) for component_id, p in toys],
        config.score,
        logging.INFO,
        span_events=span_events,
    )
    workers = WorkerScoring(
        setup,
        config.scoring_workers,
        tuple(n for _, p in processors for n in p.trace_metric_names),
        tuple(n for _, p in processors for n in p.session_metric_names),
        any(p.uses_sessions for _, p in processors),
    )
    await workers.start()
    return workers
