from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.event_loop_thread import EventLoopThread
from tests.support.otlp_sink import OtlpSink
from tests.support.prometheus_rig import PROMETHEUS
from tests.support.running import RunningCollector


@pytest.fixture
def loop_thread():
    loop = EventLoopThread()
    yield loop
    loop.close()


@pytest.fixture
def sink(loop_thread):
    backend = loop_thread.run(OtlpSink().start())
    yield backend
    loop_thread.run(backend.stop())


@pytest.fixture
def start_collector(loop_thread):
    """Factory: start_collector(yaml) -> RunningCollector, stopped at teardown."""
    started: list[RunningCollector] = []

    def start(config_yaml: str) -> RunningCollector:
        collector = RunningCollector(loop_thread, config_yaml)
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.stop()


@pytest.fixture
def prometheus_binary() -> Path:
    """Debian's prometheus: found, or the test skipped (failed when SPANSCORE_REQUIRE_PROMETHEUS=1)."""
    if PROMETHEUS.is_file():
        return PROMETHEUS
    reason = f"{PROMETHEUS} not found: install Debian's prometheus package (apt-get install prometheus)"
    if os.environ.get("SPANSCORE_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{reason}; SPANSCORE_REQUIRE_PROMETHEUS=1 requires it")
    pytest.skip(reason)
