"""The running collector: builds components from a Config, starts them, stops them cleanly.

Start order: extensions, processors and exporters (inside the pipeline), receivers
last, so nothing is accepted before it can be handled. Shutdown reverses it: receivers
stop accepting, buffered traces and sessions are pushed through processors and
exporters, exporters flush, all within `service.shutdown_timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from collector import registry
from collector.assembler import Assembler
from collector.config import Config
from collector.pipeline import Pipeline
from exporters.score_metrics import ScoreMetrics

log = logging.getLogger("spanscore")

RECEIVER_GRACE_S = 1.0


class Service:
    def __init__(self, config: Config):
        self.config = config
        self.assembler = Assembler(config.assembler)
        processors = [
            (c.id, registry.lookup("processor", c.type).factory(c.id, c.config)) for c in config.processors[1:]
        ]
        exporters = [registry.lookup("exporter", c.type).factory(c.id, c.config) for c in config.exporters]
        self.score_metrics: ScoreMetrics | None = None
        self.pipeline = Pipeline(self.assembler, processors, exporters)
        self.receivers = [registry.lookup("receiver", c.type).factory(c.id, c.config) for c in config.receivers]
        self.extensions = [registry.lookup("extension", c.type).factory(c.id, c.config) for c in config.extensions]
        self._started: list = []

    async def start(self) -> None:
        try:
            if self.config.metric_exporters:
                self.score_metrics = self._score_metrics()
                self.pipeline.score_metrics = self.score_metrics
            for extension in self.extensions:
                await extension.start()
                self._started.append(extension)
            await self.pipeline.start()
            for receiver in self.receivers:
                await receiver.start(self.pipeline)
                self._started.append(receiver)
        except BaseException:
            await self._stop_started()
            raise
        for extension in self.extensions:
            if hasattr(extension, "healthy"):
                extension.healthy = True
        log.info("spanscore running: %s", self.config.summary())
        if not self.pipeline.processors:
            log.info("no scoring processors in the pipeline: traces are assembled and forwarded without scores")

    async def shutdown(self) -> None:
        """Stop accepting, then flush everything held, bounded by the shutdown timeout."""
        deadline = time.monotonic() + self.config.service.shutdown_timeout
        for extension in self.extensions:
            if hasattr(extension, "healthy"):
                extension.healthy = False
        for receiver in self.receivers:
            await receiver.stop(RECEIVER_GRACE_S)
        await self.pipeline.shutdown(deadline)
        if self.score_metrics is not None:
            await asyncio.to_thread(self.score_metrics.shutdown, max(0.0, deadline - time.monotonic()))
        for extension in self.extensions:
            await extension.shutdown()
        dropped = sum(e.dropped_spans for e in self.pipeline.exporters)
        log.info(
            "spanscore stopped: received %d spans, rejected %d, exported %d traces, exporters dropped %d spans",
            self.pipeline.received_spans, self.pipeline.rejected_spans, self.pipeline.exported_traces, dropped,
        )

    def _score_metrics(self) -> ScoreMetrics:
        interval_s = self.config.service.pipelines.metrics.export_interval
        readers = []
        try:
            for c in self.config.metric_exporters:
                readers.append(registry.lookup("exporter", c.type).metrics_factory(c.id, c.config, interval_s))
        except BaseException:
            for reader in readers:
                reader.shutdown()
            raise
        return ScoreMetrics(readers)

    async def _stop_started(self) -> None:
        for component in reversed(self._started):
            try:
                if hasattr(component, "stop"):
                    await component.stop(0)
                else:
                    await component.shutdown()
            except Exception:
                log.exception("while stopping after a failed start")
        await self.pipeline.shutdown(time.monotonic() + 1.0)
        if self.score_metrics is not None:
            self.score_metrics.shutdown(1.0)


async def run_until_signalled(service: Service, stop: asyncio.Event) -> None:
    await service.start()
    try:
        await stop.wait()
    finally:
        await service.shutdown()
