"""The exporter lifecycle, batching and retries shared by every exporter.

An exporter receives scored traces from the pipeline (`enqueue`), batches what is
waiting up to `sending_queue.batch_max_spans`, sends each batch, and retries retryable
failures with exponential backoff and jitter, honouring a server's requested delay, as
the OTLP specification asks. Memory is bounded by the pipeline (`max_buffered_spans`
counts spans until every exporter is done with them), so the queue itself is unbounded.

With `sending_queue.storage` (exporters that send encoded requests: otlp, otlphttp) the
queue is on disk: each trace is written there as an export request and leaves memory
once stored, one consumer sends the stored requests oldest first and retries them for
as long as the backend is down (`max_elapsed_time` does not apply), and what is unsent
at a stop is sent after the next start. When the store is full, traces queue in memory.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import Field

from spanscore.core.auth import client_headers
from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, Host
from spanscore.core.durations import Duration
from spanscore.core.export_request import serialized_request
from spanscore.core.sending_storage import SendingStorage, SendingStorages
from spanscore.core.telemetry import Readout, TelemetryMetric
from spanscore.core.trace import Trace

log = logging.getLogger("spanscore.exporters")
_T = TypeVar("_T")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BATCH_MAX_SPANS = 4096
# A send waits up to the flush timeout for this many spans: scored traces come back a few
# at a time, and each send has a fixed cost on the collector's thread.
DEFAULT_BATCH_MIN_SPANS = 1024
DEFAULT_BATCH_FLUSH_TIMEOUT_S = 0.1
DEFAULT_NUM_CONSUMERS = 4

# How a send ended.
SENT, REFUSED, GAVE_UP = "sent", "refused", "gave up"

STORED_SPANS = TelemetryMetric(
    "spanscore_exporter_stored_spans",
    "{span}",
    "Spans waiting in the exporters' persistent sending queues (sending_queue.storage)",
    "gauge",
)


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
    batch_min_spans: int = Field(default=DEFAULT_BATCH_MIN_SPANS, ge=1)
    batch_flush_timeout: Duration = DEFAULT_BATCH_FLUSH_TIMEOUT_S  # 0 sends what is waiting at once
    storage: str | None = None  # a `file_storage` extension id: the queue is kept on disk there


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

    # Exporters that implement `send_encoded` can keep their queue in a storage extension.
    stores_requests = False

    @property
    def sends_protobuf(self) -> bool:
        """It sends traces as the OTLP protobuf request: a trace a scoring worker encoded
        (`Trace.encoded`) goes as its bytes, and no other part of it is read."""
        return False

    def __init__(self, component_id: str, config: ExporterConfig):
        self.id = component_id
        self.config = config
        self.storage: SendingStorage | None = None  # per sending_queue.storage, found through the host at start
        self.headers: dict[str, str] = {}  # the config's, with its authenticator's, set at start
        self._stored: list[tuple[int, Trace]] = []  # written to storage, waiting to be durable there
        self._confirming: asyncio.Task | None = None
        self._stored_ready = asyncio.Event()
        self._queue: deque[Trace] = deque()
        self._queued_spans = 0
        self._waiting_since = 0.0  # when the oldest trace in the queue was enqueued
        self._ready = asyncio.Event()
        self._closing = False
        self._deadline: float | None = None
        self._workers: list[asyncio.Task] = []
        self.sent_spans = 0
        self.dropped_spans = 0
        self.kept_spans = 0  # given up on, kept by the write-ahead log for the next start
        self.dropped_by_reason: Counter[str] = Counter()

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        self.headers = client_headers(self.config, host)
        storage_id = self.config.sending_queue.storage
        if storage_id is not None:
            self.storage = host.extension(storage_id, SendingStorages).queue_for(self.id)
        await self.open()
        self._workers = [
            asyncio.create_task(self._work(), name=f"{self.id}-{i}")
            for i in range(self.config.sending_queue.num_consumers)
        ]
        if self.storage is not None:
            restored = self.storage.open()
            if restored:
                log.warning(
                    "exporter %s: %d spans stored unsent before the last stop; sending them first", self.id, restored
                )
            self._workers.append(asyncio.create_task(self._work_stored(self.storage), name=f"{self.id}-stored"))

    def enqueue(self, trace: Trace) -> None:
        if self._closing:
            raise RuntimeError(f"exporter {self.id} is shut down")
        storage = self.storage
        if storage is not None and not storage.full:
            number = storage.put(serialized_request([trace]), trace.span_count)
            self._stored.append((number, trace))
            if self._confirming is None:
                self._confirming = asyncio.create_task(self._confirm_stored(storage))
            self._stored_ready.set()
            return
        if not self._queue:
            self._waiting_since = time.monotonic()
        self._queue.append(trace)
        self._queued_spans += trace.span_count
        self._ready.set()

    @property
    def stored_spans(self) -> int:
        return self.storage.queued_spans if self.storage is not None else 0

    def telemetry(self) -> list[Readout]:
        """Beside what every exporter counts (`core.trace_exporter`), its persistent queue's depth."""
        return [STORED_SPANS.reads(lambda: self.stored_spans)]

    async def _confirm_stored(self, storage: SendingStorage) -> None:
        """Traces leave memory (and the write-ahead log) once their stored copy is durable."""
        try:
            while self._stored:
                stored, self._stored = self._stored, []
                undelivered = False
                try:
                    await storage.durable(stored[-1][0])
                except OSError as exc:  # not known to be on disk: the write-ahead log keeps the traces
                    log.error("exporter %s: could not store %d traces: %s", self.id, len(stored), exc)
                    undelivered = True
                for _, trace in stored:
                    trace.export_done(undelivered)
        finally:
            self._confirming = None

    async def shutdown(self, deadline: float) -> None:
        """Send what is queued, retrying until `deadline` (monotonic), then close.

        Safe without `start` (nothing was opened) and safe twice (the second is a no-op).
        """
        if self._closing:
            return
        self._closing = True
        self._deadline = deadline
        self._ready.set()
        self._stored_ready.set()
        if self._confirming is not None:
            await self._confirming
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=max(0.0, deadline - time.monotonic()))
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._queue:
            queued, self._queue = list(self._queue), deque()
            self._queued_spans = 0
            self._give_up(queued, "not sent by the shutdown deadline")
        await self.close()

    # Subclass hooks.
    async def open(self) -> None:
        return None

    async def send(self, traces: list[Trace]) -> None:
        raise NotImplementedError

    async def send_encoded(self, request: bytes) -> None:
        """Send an encoded ExportTraceServiceRequest (exporters with `stores_requests`)."""
        raise NotImplementedError

    async def close(self) -> None:
        return None

    async def _next_items(self, take: Callable[[], list[_T]], ready: asyncio.Event) -> list[_T]:
        """What `take` gives, waiting on `ready` while it gives nothing; empty once closing."""
        while True:
            items = take()
            if items or self._closing:
                return items
            ready.clear()
            await ready.wait()

    async def _next_batch(self) -> list[Trace]:
        """The next batch: at once when `batch_min_spans` are waiting (or closing), else
        once the oldest waiting trace has waited `batch_flush_timeout`; empty once closing."""
        queue_config = self.config.sending_queue
        while True:
            if self._queue:
                remaining = self._waiting_since + queue_config.batch_flush_timeout - time.monotonic()
                if self._closing or remaining <= 0 or self._queued_spans >= queue_config.batch_min_spans:
                    return self._take_batch()
            elif self._closing:
                return []
            else:
                remaining = None
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), remaining)
            except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                pass

    async def _work(self) -> None:
        while batch := await self._next_batch():
            span_count = sum(t.span_count for t in batch)
            try:
                outcome, why = await self._send_with_retry(lambda: self.send(batch), span_count)
            except asyncio.CancelledError:
                self._give_up(batch, "cut off by the shutdown deadline while being sent (the backend may have them)")
                raise
            if outcome is GAVE_UP:
                self._give_up(batch, why)
                continue
            if outcome is REFUSED:
                self._dropped(span_count, outcome)
            for trace in batch:
                trace.export_done()

    async def _work_stored(self, storage: SendingStorage) -> None:
        """Sends the stored requests, oldest first; what is not sent stays stored."""
        while items := await self._next_items(
            lambda: storage.take(self.config.sending_queue.batch_max_spans), self._stored_ready
        ):
            # Encoded requests concatenated are one request holding all their spans.
            payload = b"".join(data for _, data, _ in items)
            span_count = sum(spans for _, _, spans in items)
            try:
                outcome, _ = await self._send_with_retry(
                    lambda payload=payload: self.send_encoded(payload), span_count, stored=True
                )
            except asyncio.CancelledError:
                storage.give_back(items)
                raise
            if outcome is GAVE_UP:  # the shutdown deadline: they are sent after the next start
                storage.give_back(items)
                return
            if outcome is REFUSED:
                self._dropped(span_count, outcome)
            for number, _, spans in items:
                storage.ack(number, spans)

    def _take_batch(self) -> list[Trace]:
        batch: list[Trace] = []
        spans = 0
        limit = self.config.sending_queue.batch_max_spans
        while self._queue and (not batch or spans + self._queue[0].span_count <= limit):
            trace = self._queue.popleft()
            batch.append(trace)
            spans += trace.span_count
        self._queued_spans -= spans
        self._waiting_since = time.monotonic()  # what is left waits from now
        return batch

    async def _send_with_retry(
        self, send: Callable[[], Awaitable[None]], span_count: int, stored: bool = False
    ) -> tuple[str, str]:
        """How it ended and, for GAVE_UP, why. SENT; REFUSED (for good, or an unexpected
        error: not retried, logged here); or GAVE_UP while the backend could still take it:
        past `max_elapsed_time` (not for stored requests) or the shutdown deadline."""
        retry = self.config.retry_on_failure
        started = time.monotonic()
        interval = retry.initial_interval
        while True:
            try:
                await send()
                self.sent_spans += span_count
                return SENT, ""
            except ExportError as exc:
                error = exc
            except Exception:  # a bug or an unexpected client error: do not retry blindly
                log.exception("exporter %s: unexpected error sending %d spans", self.id, span_count)
                return REFUSED, ""
            now = time.monotonic()
            delay = error.retry_after_s
            if delay is None:
                delay = interval * (1 + retry.randomization_factor * (2 * random.random() - 1))
                interval = min(interval * retry.multiplier, retry.max_interval)
            limits = []
            if retry.max_elapsed_time and not stored:
                limits.append(started + retry.max_elapsed_time)
            if self._deadline is not None:
                limits.append(self._deadline)
            give_up_at = min(limits, default=None)
            if not error.retryable:
                log.error(
                    "exporter %s: dropping %d spans after %.1fs: %s (not retryable)",
                    self.id,
                    span_count,
                    now - started,
                    error,
                )
                return REFUSED, ""
            if not retry.enabled or (give_up_at is not None and now + delay > give_up_at):
                if stored:
                    log.warning(
                        "exporter %s: %d stored spans not sent by the shutdown deadline (%s); they stay stored",
                        self.id,
                        span_count,
                        error,
                    )
                return GAVE_UP, f"not acknowledged after {now - started:.1f}s: {error}"
            log.warning("exporter %s: %s; retrying in %.2fs", self.id, error, delay)
            await asyncio.sleep(delay)

    def _dropped(self, count: int, outcome: str) -> None:
        self.dropped_spans += count
        reason = "refused" if outcome is REFUSED else "shutdown" if self._closing else "retries_exhausted"
        self.dropped_by_reason[reason] += count

    def _give_up(self, batch: list[Trace], why: str) -> None:
        """Traces not delivered: kept by the write-ahead log when it holds them (then sent
        again after the next start), else dropped; either way said in one line each."""
        kept = sum(t.span_count for t in batch if t.logged)
        dropped = sum(t.span_count for t in batch) - kept
        if kept:
            self.kept_spans += kept
            log.warning(
                "exporter %s: %d spans %s; the write-ahead log keeps them to send after the next start",
                self.id,
                kept,
                why,
            )
        if dropped:
            self._dropped(dropped, GAVE_UP)
            log.error("exporter %s: dropping %d spans: %s", self.id, dropped, why)
        for trace in batch:
            trace.export_done(undelivered=True)
