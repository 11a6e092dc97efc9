"""The pipeline between an in-memory receiver and in-memory exporters, on a hand-held clock.

`rig_for` is a fixture; a conftest makes it available with
`from tests.support.pipeline_rig import rig_for`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from spanscore.exporters.memory import MemoryExporter
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.base import Processor
from spanscore.receivers.memory import MemoryReceiver


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

    async def at(self, now: float) -> None:
        """Set the clock, release what is due and wait until it reached the exporters."""
        self.clock.now = now
        self.pipeline.tick()
        await self.pipeline.settle()

    async def drain(self) -> None:
        await self.pipeline.drain(time.monotonic() + 5.0)


@pytest.fixture
async def rig_for():
    """Factory: rig_for(*processors, exporters=..., **assembler settings) -> a started Rig."""
    rigs: list[Rig] = []

    async def build(
        *processors: Processor, exporters: list[MemoryExporter] | None = None, span_events: bool = True, **settings
    ) -> Rig:
        clock = Clock()
        config = PipelineSettings(**{"trace_wait": 1.0, "trace_timeout": 30.0, "session_idle": 60.0, **settings})
        exporters = exporters or [MemoryExporter()]
        pipeline = Pipeline(
            Assembler(config),
            [(f"processor/{i}", p) for i, p in enumerate(processors)],
            exporters,
            clock=clock,
            span_events=span_events,
        )
        await pipeline.start()
        rig = Rig(clock, pipeline, MemoryReceiver(pipeline.intake), exporters[0])
        rigs.append(rig)
        return rig

    yield build
    for rig in rigs:
        await rig.drain()
        for exporter in rig.pipeline.exporters:
            await exporter.shutdown(time.monotonic() + 5.0)
