"""`memory_limiter`: refuses at the receivers' door above the soft limit, reads memory at
most once per check interval, logs each crossing once, and takes data again once memory
falls. Memory and time are passed in."""

from __future__ import annotations

import asyncio
import gc
import logging
import os

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import ValidationError

from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.consumer import NO_RESERVATION, ConsumeOutcome, ConsumerFull, Reservation, TooCostly
from spanscore.pipeline.memory_limiter import (
    FORCED_COLLECTION_INTERVAL_S,
    MIB,
    MemoryLimiter,
    MemoryLimiterConfig,
    resident_bytes,
)
from tests.support.factories import TEST_FACTORIES


class Downstream:
    def __init__(self):
        self.checks = 0
        self.consumed = 0

    def check_capacity(self) -> None:
        self.checks += 1

    def reserve(self, cost_bytes: int) -> Reservation:
        return NO_RESERVATION

    def consume(
        self, request: ExportTraceServiceRequest, data: bytes | None = None, write_ahead: bool = True
    ) -> ConsumeOutcome:
        self.consumed += 1
        return ConsumeOutcome(accepted=1, rejected=0)

    async def durable(self, outcome: ConsumeOutcome) -> None:
        return None


class Rig:
    """A limiter over a downstream consumer, with memory and time set by the test."""

    def __init__(self, limit_mib: int = 100, spike_limit_mib: int | None = None, check_interval: float = 1.0):
        self.rss_mib = 10.0
        self.now = 0.0
        self.reads = 0
        self.downstream = Downstream()
        config = MemoryLimiterConfig(
            limit_mib=limit_mib, spike_limit_mib=spike_limit_mib, check_interval=check_interval
        )
        self.limiter = MemoryLimiter(
            "memory_limiter", config, self.downstream, read_rss=self._read, clock=lambda: self.now
        )

    def _read(self) -> int:
        self.reads += 1
        return int(self.rss_mib * MIB)

    def loop_start(self) -> None:
        asyncio.run(self.limiter.start())

    def admitted(self) -> bool:
        try:
            self.limiter.check_capacity()
        except ConsumerFull:
            return False
        return True

    def at(self, rss_mib: float, after_s: float = 1.0) -> bool:
        """Memory becomes `rss_mib`, `after_s` pass, a request asks: was it admitted?"""
        self.rss_mib = rss_mib
        self.now += after_s
        return self.admitted()


@pytest.mark.parametrize("spike, soft", [(None, 80), (30, 70), (0, 100)])
def test_the_soft_limit_is_the_limit_less_the_spike_a_fifth_by_default(spike, soft):
    assert MemoryLimiterConfig(limit_mib=100, spike_limit_mib=spike).soft_limit_mib == soft


def test_below_the_soft_limit_requests_go_on_to_the_pipeline():
    rig = Rig()
    assert rig.at(79)
    assert rig.limiter.consume(ExportTraceServiceRequest()) == ConsumeOutcome(accepted=1, rejected=0)
    assert (rig.downstream.checks, rig.downstream.consumed, rig.limiter.refused_requests) == (1, 1, 0)


def test_above_the_soft_limit_requests_are_refused_with_a_retry_delay_and_counted():
    rig = Rig(check_interval=2.5)
    rig.at(81)
    with pytest.raises(ConsumerFull) as refusal:
        rig.limiter.check_capacity()
    assert refusal.value.retry_after_s == 3  # the check interval, rounded up
    assert "above the memory_limiter's soft limit of 80 MiB" in str(refusal.value)
    with pytest.raises(ConsumerFull):
        rig.limiter.consume(ExportTraceServiceRequest())
    assert (rig.downstream.checks, rig.downstream.consumed, rig.limiter.refused_requests) == (0, 0, 3)


def test_memory_is_read_at_most_once_per_check_interval():
    rig = Rig(check_interval=1.0)
    for _ in range(50):
        rig.at(10, after_s=0.01)
    assert rig.reads == 1
    rig.at(10, after_s=0.6)
    assert rig.reads == 2


def test_requests_are_taken_again_once_memory_falls():
    rig = Rig(check_interval=1.0)
    assert not rig.at(90)
    assert not rig.at(10, after_s=0.5)  # not read again yet
    assert rig.at(10, after_s=0.5)


def test_above_the_soft_limit_a_full_collection_runs_before_refusing_at_most_once_per_interval():
    """Memory that only a cyclic collection frees (the rig's memory falls when a full
    collection ends) does not keep the limiter refusing; collections are spaced out."""
    rig = Rig()
    full_collections = []

    def on_collection(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            full_collections.append(rig.now)
            rig.rss_mib = 50

    gc.callbacks.append(on_collection)
    try:
        assert rig.at(90)  # collected, then read again at 50 MiB
        assert not rig.at(90)  # too soon for another collection
        assert rig.at(90, after_s=FORCED_COLLECTION_INTERVAL_S)
        assert rig.at(10)  # below the soft limit: nothing to collect
    finally:
        gc.callbacks.remove(on_collection)
    assert full_collections == [1.0, 2.0 + FORCED_COLLECTION_INTERVAL_S]


def test_each_crossing_is_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="spanscore.memory_limiter")
    rig = Rig()
    for rss_mib in (85, 85, 85, 120, 120, 120, 90, 50, 50, 120, 120):
        rig.at(rss_mib)
    assert [(r.levelname, r.getMessage().split(";")[0]) for r in caplog.records] == [
        ("WARNING", "memory use 85 MiB is above the soft limit of 80 MiB"),
        ("ERROR", "memory use 120 MiB is above the hard limit of 100 MiB"),
        ("INFO", "memory use 50 MiB is back below the soft limit of 80 MiB"),
        ("ERROR", "memory use 120 MiB is above the hard limit of 100 MiB"),
    ]
    assert rig.limiter.refused_requests == 9  # every reading above 80 MiB


async def test_start_fails_where_memory_cannot_be_read():
    def unreadable() -> int:
        raise FileNotFoundError(2, "No such file or directory")

    limiter = MemoryLimiter("memory_limiter", MemoryLimiterConfig(limit_mib=100), Downstream(), read_rss=unreadable)
    with pytest.raises(OSError, match="cannot read this process's memory use from /proc/self/statm"):
        await limiter.start()


def test_the_reading_is_this_process_resident_set():
    rss = resident_bytes()
    assert rss > 10 * MIB
    with open(f"/proc/{os.getpid()}/status") as status:
        vm_rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
    assert abs(rss - vm_rss) < 8 * MIB


@pytest.mark.parametrize(
    "settings, problem",
    [
        ({}, "limit_mib"),
        ({"limit_mib": 0}, "greater than 0"),
        ({"limit_mib": 100, "spike_limit_mib": 100}, "spike_limit_mib (100) must be below limit_mib (100)"),
        ({"limit_mib": 100, "check_interval": "0s"}, "check_interval must be greater than 0"),
    ],
)
def test_settings_that_cannot_work_are_refused(settings, problem):
    with pytest.raises(ValidationError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        MemoryLimiterConfig.model_validate(settings)


def pipeline_config(processors: str, limiters: str = "  memory_limiter: {limit_mib: 512}") -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors:
{limiters}
  toy_metric: {{}}
exporters: {{debug: {{}}}}
service: {{pipelines: {{traces: {{receivers: [otlp], processors: {processors}, exporters: [debug]}}}}}}
"""


@pytest.mark.parametrize("processors", ["[memory_limiter, assembler, toy_metric]", "[toy_metric, memory_limiter]"])
def test_it_may_be_listed_anywhere_and_is_not_among_the_processors_that_score(processors):
    config = parse_config(pipeline_config(processors), factories=TEST_FACTORIES)
    assert list(config.processor_ids) == ["assembler", "toy_metric"] and [c.id for c in config.processors] == [
        "toy_metric"
    ]
    assert config.memory_limiter.id == "memory_limiter"
    assert config.unused == []
    assert config.summary().endswith("; memory limiter: memory_limiter")


def test_only_one_memory_limiter_may_run():
    text = pipeline_config(
        "[memory_limiter, memory_limiter/b]", "  memory_limiter: {limit_mib: 512}\n  memory_limiter/b: {limit_mib: 256}"
    )
    with pytest.raises(ConfigError) as error:
        parse_config(text, factories=TEST_FACTORIES)
    assert error.value.problems == ["service.pipelines.traces.processors: only one memory_limiter may run"]


def test_memory_a_request_will_take_to_decode_is_counted_before_it_is_spent():
    rig = Rig()  # soft limit 80 MiB
    rig.at(20)
    first = rig.limiter.reserve(30 * MIB)
    second = rig.limiter.reserve(20 * MIB)
    assert rig.limiter.reserved_bytes == 50 * MIB
    with pytest.raises(ConsumerFull) as refusal:  # 20 + 50 + 20 > 80
        rig.limiter.reserve(20 * MIB)
    assert "leave no room for this one's 20 MiB" in str(refusal.value) and refusal.value.retry_after_s == 1
    second.grow(5 * MIB)  # a body longer than first known
    with pytest.raises(ConsumerFull):
        second.grow(10 * MIB)
    assert rig.limiter.refused_requests == 2
    first.release()
    first.release()  # idempotent
    # Released, it counts until memory is read again: what decoding left is in that reading.
    with pytest.raises(ConsumerFull):
        rig.limiter.reserve(20 * MIB)
    rig.at(25)
    rig.limiter.reserve(20 * MIB)
    assert rig.limiter.reserved_bytes == 45 * MIB


def test_a_request_that_could_never_fit_is_refused_for_good():
    rig = Rig()  # soft limit 80 MiB
    rig.loop_start()
    with pytest.raises(TooCostly) as refusal:
        rig.limiter.reserve(71 * MIB)  # more than the soft limit less the 10 MiB used at start
    assert "can give one request (70 MiB: its soft limit less the 10 MiB used at start)" in str(refusal.value)
    growing = rig.limiter.reserve(60 * MIB)
    with pytest.raises(TooCostly):
        growing.grow(11 * MIB)
    assert (rig.limiter.too_costly_requests, rig.limiter.refused_requests) == (2, 0)
