"""`memory_limiter` processor: refuse new data while the process uses too much memory.

The Collector's memory_limiter, in its config shape: above the soft limit (`limit_mib -
spike_limit_mib`) requests are refused with the answer the receivers give when the
pipeline is full (HTTP 503 + Retry-After, gRPC UNAVAILABLE + RetryInfo), so clients
retry later instead of losing data; above the hard limit (`limit_mib`) too, and the
crossing is logged as an error. The resident set size is read from /proc/self/statm at
most once per `check_interval`, when a request asks. A reading above the soft limit
first forces a full garbage collection (at most once per `FORCED_COLLECTION_INTERVAL_S`)
and reads again, as the Collector's limiter forces Go's: with the collector's sparse
collection thresholds (pipeline/gc_tuning.py), garbage held in reference cycles could
otherwise keep it refusing although nothing in use needs the memory.

Memory is also counted before it is spent: a receiver reserves what a request will take
while it is read and decoded (its body's size times its encoding's decoding factor)
before reading or decoding it. A reservation that would take the memory last read, plus
what is reserved, past the soft limit is refused the same way; one larger than the soft
limit less what the collector used at start could never fit and is refused for good
(TooCostly: 413 / RESOURCE_EXHAUSTED). A released reservation stays counted until memory
is next read, which then shows what the decoded request left behind.

It stands between the receivers and the pipeline, wherever it is listed among the
processors: spanscore's processors see assembled traces long after a request was
answered, so only at the door can a refusal still tell the client to retry. It scores
nothing. The service builds it with the pipeline as its next consumer, as it builds the
assembler itself.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import time
from collections.abc import Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import Field, model_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.consumer import ConsumeOutcome, ConsumerFull, Reservation, TooCostly, TracesConsumer
from spanscore.core.durations import Duration
from spanscore.core.telemetry import Readout, TelemetryMetric

log = logging.getLogger("spanscore.memory_limiter")

MIB = 2**20
DEFAULT_CHECK_INTERVAL_S = 1.0
DEFAULT_SPIKE_SHARE = 0.2  # the Collector's default spike limit: a fifth of the limit
STATM = "/proc/self/statm"
# A full collection of a collector holding many traces takes a while: not at every reading.
FORCED_COLLECTION_INTERVAL_S = 10.0

REFUSED_REQUESTS = TelemetryMetric(
    "spanscore_memory_limiter_refused_requests",
    "{request}",
    "Requests turned away while memory use was above the memory_limiter's soft limit, for the client to retry",
    "counter",
)


class MemoryLimiterConfig(ComponentConfig):
    check_interval: Duration = DEFAULT_CHECK_INTERVAL_S
    limit_mib: int = Field(gt=0)
    spike_limit_mib: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _limits(self) -> MemoryLimiterConfig:
        if self.check_interval <= 0:
            raise ValueError("check_interval must be greater than 0")
        if self.spike_limit_mib is not None and self.spike_limit_mib >= self.limit_mib:
            raise ValueError(f"spike_limit_mib ({self.spike_limit_mib}) must be below limit_mib ({self.limit_mib})")
        return self

    @property
    def soft_limit_mib(self) -> float:
        spike = self.spike_limit_mib if self.spike_limit_mib is not None else self.limit_mib * DEFAULT_SPIKE_SHARE
        return self.limit_mib - spike


def resident_bytes() -> int:
    """This process's resident set size, from /proc (Linux); raises OSError elsewhere."""
    with open(STATM, "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class MemoryLimiter:
    """A `TracesConsumer` that refuses while memory is high and hands the rest to `consumer`.

    Threading: called on the collector's event loop. `read_rss` and `clock` are seams
    for tests. Lifecycle: `start` reads the memory once, so a system without
    /proc/self/statm fails at start rather than never refusing; nothing to release.
    """

    def __init__(
        self,
        component_id: str,
        config: MemoryLimiterConfig,
        consumer: TracesConsumer,
        read_rss: Callable[[], int] = resident_bytes,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.id = component_id
        self.config = config
        self.consumer = consumer
        self.read_rss = read_rss
        self.clock = clock
        self.retry_after_s = max(1, math.ceil(config.check_interval))
        self.refused_requests = 0
        self.too_costly_requests = 0
        self.rss_bytes = 0
        self.start_rss_bytes = 0
        self.reserved_bytes = 0  # reservations open now
        self._released_bytes = 0  # reservations released since memory was last read
        self._checked_at: float | None = None
        self._collected_at: float | None = None
        self._above_soft = False
        self._above_hard = False

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        try:
            self.rss_bytes = self.start_rss_bytes = self.read_rss()
        except OSError as exc:
            raise OSError(
                f"memory_limiter {self.id} cannot read this process's memory use from {STATM}: {exc.strerror or exc}"
            ) from None

    async def shutdown(self, deadline: float) -> None:
        return None

    def telemetry(self) -> list[Readout]:
        return [REFUSED_REQUESTS.reads(lambda: self.refused_requests)]

    def check_capacity(self) -> None:
        self._refuse_when_high()
        self.consumer.check_capacity()

    def reserve(self, cost_bytes: int) -> Reservation:
        reservation = _Reservation(self)
        reservation.grow(cost_bytes)
        return reservation

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        self._refuse_when_high()
        return self.consumer.consume(request, data, write_ahead)

    async def durable(self, outcome: ConsumeOutcome) -> None:
        await self.consumer.durable(outcome)

    def _refuse_when_high(self) -> None:
        now = self.clock()
        if self._checked_at is None or now - self._checked_at >= self.config.check_interval:
            self._checked_at = now
            self._measure(now)
        if self._above_soft:
            self.refused_requests += 1
            raise ConsumerFull(
                f"memory use {self.rss_bytes / MIB:.0f} MiB is above the memory_limiter's soft limit "
                f"of {self.config.soft_limit_mib:.0f} MiB; retry later",
                self.retry_after_s,
            )

    def _admit(self, total_bytes: int, more_bytes: int) -> None:
        """Count `more_bytes` for a reservation that then holds `total_bytes`, or raise."""
        self._refuse_when_high()
        soft = self.config.soft_limit_mib * MIB
        # A limit below what the collector used at start leaves only the limit itself to go by.
        headroom = soft - self.start_rss_bytes if self.start_rss_bytes < soft else soft
        if total_bytes > headroom:
            self.too_costly_requests += 1
            raise TooCostly(
                f"decoding this request takes about {total_bytes / MIB:.0f} MiB, more than the memory_limiter "
                f"can give one request ({headroom / MIB:.0f} MiB: its soft limit less the "
                f"{(soft - headroom) / MIB:.0f} MiB used at start); send smaller requests or raise limit_mib"
            )
        counted = self.rss_bytes + self.reserved_bytes + self._released_bytes
        if counted + more_bytes > soft:
            self.refused_requests += 1
            raise ConsumerFull(
                f"memory use {self.rss_bytes / MIB:.0f} MiB and {(counted - self.rss_bytes) / MIB:.0f} MiB counted for "
                f"requests being decoded leave no room for this one's {total_bytes / MIB:.0f} MiB below the "
                f"memory_limiter's soft limit of {self.config.soft_limit_mib:.0f} MiB; retry later",
                self.retry_after_s,
            )
        self.reserved_bytes += more_bytes

    def _release(self, cost_bytes: int) -> None:
        self.reserved_bytes -= cost_bytes
        self._released_bytes += cost_bytes

    def _measure(self, now: float) -> None:
        self._released_bytes = 0  # what they left behind is in the reading now
        self.rss_bytes = self.read_rss()
        if self.rss_bytes > self.config.soft_limit_mib * MIB and (
            self._collected_at is None or now - self._collected_at >= FORCED_COLLECTION_INTERVAL_S
        ):
            self._collected_at = now
            gc.collect()
            self.rss_bytes = self.read_rss()
        rss_mib = self.rss_bytes / MIB
        above_soft = rss_mib > self.config.soft_limit_mib
        above_hard = rss_mib > self.config.limit_mib
        if above_hard and not self._above_hard:
            log.error(
                "memory use %.0f MiB is above the hard limit of %d MiB; refusing data", rss_mib, self.config.limit_mib
            )
        elif above_soft and not self._above_soft and not above_hard:
            log.warning(
                "memory use %.0f MiB is above the soft limit of %.0f MiB; refusing data",
                rss_mib,
                self.config.soft_limit_mib,
            )
        elif self._above_soft and not above_soft:
            log.info(
                "memory use %.0f MiB is back below the soft limit of %.0f MiB; taking data again",
                rss_mib,
                self.config.soft_limit_mib,
            )
        self._above_soft, self._above_hard = above_soft, above_hard


class _Reservation:
    def __init__(self, limiter: MemoryLimiter):
        self._limiter = limiter
        self.bytes = 0
        self._open = True

    def grow(self, cost_bytes: int) -> None:
        if cost_bytes > 0:
            self._limiter._admit(self.bytes + cost_bytes, cost_bytes)
            self.bytes += cost_bytes

    def release(self) -> None:
        if self._open:
            self._open = False
            self._limiter._release(self.bytes)


FACTORY = ComponentFactory("stage", "memory_limiter", MemoryLimiterConfig, MemoryLimiter)
