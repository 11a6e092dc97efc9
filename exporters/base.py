"""The exporter lifecycle, batching and retries shared by every exporter.

An exporter receives scored traces from the pipeline (`enqueue`), batches what is
waiting up to `sending_queue.batch_max_spans`, sends each batch, and retries retryable
failures with exponential backoff and jitter, honouring a server's requested delay, as
the OTLP specification asks. Memory is bounded by the pipeline (`max_buffered_spans`
counts spans until every exporter is done with them), so the queue itself is unbounded.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque

from pydantic import Field

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration
from spanscore.core.trace import Trace

log = logging.getLogger("spanscore.exporters")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BATCH_MAX_SPANS = 4096
DEFAULT_NUM_CONSUMERS = 4


class RetryConfig(ComponentConfig):
    enabled: bool = True
    initial_interval: Duration = 5.0
    max_interval: Duration = 30.0
    max_elapsed_time: Duration = 300.0  # 0 retries forever
    multiplier: float = Field(default=1.5, ge=1.0)
    randomization_factor: float = Field(default=0.5, ge=0.0, le=1.0)


class QueueConfig(ComponentConfig):
    num_consumers: int = Field(default=DEFAULT_NUM_CONSUMERS, ge=1, le=256)
    batch_max_spans: int = Field(default=DEFAULT_BATCH_MAX_SPANS, ge=1)


class ExporterConfig(ComponentConfig):
    timeout: Duration = DEFAULT_TIMEOUT_S
    retry_on_failure: RetryConfig = Field(default_factory=RetryConfig)
    sending_queue: QueueConfig = Field(default_factory=QueueConfig)


class ExportError(Exception):
    """A failed send; `retryable` per the OTLP spec, `retry_after_s` if the server said."""

    def __init__(self, message: str, retryable: bool, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


class Exporter:
    """Batching and retries over `send`: a `TraceExporter` (spanscore.core.trace_exporter).

    Subclasses implement `send(traces)` and optionally `open`/`close`.

    Threading: everything runs on the collector's event loop. Ownership: traces are
    lent read-only; the exporter calls `trace.export_done()` exactly once per enqueued
    trace, after success or after giving up, and must not keep references afterwards.
    """

    def __init__(self, component_id: str, config: ExporterConfig):
        self.id = component_id
        self.config = config
        self._queue: deque[Trace] = deque()
        self._ready = asyncio.Event()
        self._closing = False
        self._deadline: float | None = None
        self._workers: list[asyncio.Task] = []
        self.sent_spans = 0
        self.dropped_spans = 0

    async def start(self) -> None:
        await self.open()
        self._workers = [
            asyncio.create_task(self._work(), name=f"{self.id}-{i}")
            for i in range(self.config.sending_queue.num_consumers)
        ]

    def enqueue(self, trace: Trace) -> None:
        if self._closing:
            raise RuntimeError(f"exporter {self.id} is shut down")
        self._queue.append(trace)
        self._ready.set()

    async def shutdown(self, deadline: float) -> None:
        """Send what is queued, retrying until `deadline` (monotonic), then close.

        Safe without `start` (nothing was opened) and safe twice (the second is a no-op).
        """
        if self._closing:
            return
        self._closing = True
        self._deadline = deadline
        self._ready.set()
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=max(0.0, deadline - time.monotonic()))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        while self._queue:
            self._give_up([self._queue.popleft()], "shutdown deadline passed", undelivered=True)
        await self.close()

    # Subclass hooks.
    async def open(self) -> None:
        return None

    async def send(self, traces: list[Trace]) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None

    async def _work(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                if self._closing:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            try:
                delivered = await self._send_with_retry(batch)
            except asyncio.CancelledError:
                self._give_up(batch, "shutdown deadline passed", undelivered=True)
                raise
            for trace in batch:
                trace.export_done(undelivered=not delivered)

    def _take_batch(self) -> list[Trace]:
        batch: list[Trace] = []
        spans = 0
        limit = self.config.sending_queue.batch_max_spans
        while self._queue and (not batch or spans + self._queue[0].span_count <= limit):
            trace = self._queue.popleft()
            batch.append(trace)
            spans += trace.span_count
        return batch

    async def _send_with_retry(self, batch: list[Trace]) -> bool:
        """Send with retries; False when given up on while the backend could still take it."""
        retry = self.config.retry_on_failure
        started = time.monotonic()
        interval = retry.initial_interval
        span_count = sum(t.span_count for t in batch)
        while True:
            try:
                await self.send(batch)
                self.sent_spans += span_count
                return True
            except ExportError as exc:
                error = exc
            except Exception:  # a bug or an unexpected client error: do not retry blindly
                log.exception("exporter %s: unexpected error sending %d spans", self.id, span_count)
                self.dropped_spans += span_count
                return True
            now = time.monotonic()
            delay = error.retry_after_s
            if delay is None:
                delay = interval * (1 + retry.randomization_factor * (2 * random.random() - 1))
                interval = min(interval * retry.multiplier, retry.max_interval)
            limits = []
            if retry.max_elapsed_time:
                limits.append(started + retry.max_elapsed_time)
            if self._deadline is not None:
                limits.append(self._deadline)
            give_up_at = min(limits, default=None)
            if not error.retryable or not retry.enabled or (give_up_at is not None and now + delay > give_up_at):
                self.dropped_spans += span_count
                log.error("exporter %s: dropping %d spans after %.1fs: %s%s", self.id, span_count, now - started,
                          error, "" if error.retryable else " (not retryable)")
                return not error.retryable
            log.warning("exporter %s: %s; retrying in %.2fs", self.id, error, delay)
            await asyncio.sleep(delay)

    def _give_up(self, batch: list[Trace], reason: str, undelivered: bool) -> None:
        count = sum(t.span_count for t in batch)
        self.dropped_spans += count
        log.error("exporter %s: dropping %d spans: %s", self.id, count, reason)
        for trace in batch:
            trace.export_done(undelivered)
