"""Start spanscore and a fake backend in-process on loopback, for end-to-end tests."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from spanscore.collector.service import Service
from spanscore.config.loader import parse_config
from tests.support.event_loop_thread import EventLoopThread
from tests.support.factories import TEST_FACTORIES
from tests.support.otlp_sink import OtlpSink


class RunningCollector:
    """A Service started from YAML on a loop thread, with its receivers on port 0."""

    def __init__(self, loop: EventLoopThread, config_yaml: str):
        self.loop = loop
        self.config = parse_config(config_yaml, factories=TEST_FACTORIES)
        self.service = Service(self.config)
        loop.run(self.service.start())
        receiver = self.service.receivers[0]
        self.grpc_port = receiver.grpc.port if receiver.grpc else None
        self.http_port = receiver.http.port if receiver.http else None
        self._stopped = False

    @property
    def pipeline(self):
        return self.service.pipeline

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.loop.run(self.service.shutdown())


def sink_config(
    sink: OtlpSink,
    *,
    processors: str = "[assembler]",
    assembler: str = "trace_wait: 100ms",
    extra_processors: str = "",
    exporter: str = "otlp",
) -> str:
    """A config receiving on ephemeral ports and exporting to `sink` with fast retries."""
    exporters = {
        "otlp": f"otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}, tls: {{insecure: true}}, "
        f"retry_on_failure: {{initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 10s}}}}",
        "otlphttp": f"otlphttp: {{endpoint: http://127.0.0.1:{sink.http_port}, "
        f"retry_on_failure: {{initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 10s}}}}",
    }[exporter]
    return f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0}}
      http: {{endpoint: 127.0.0.1:0}}
processors:
  assembler: {{{assembler}}}
{extra_processors}
exporters:
  {exporters}
service:
  shutdown_timeout: 10s
  pipelines:
    traces:
      receivers: [otlp]
      processors: {processors}
      exporters: [{exporter}]
"""


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()


def health_check_ok(port: int) -> bool:
    """Whether a `health_check` extension on `port` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def scraped_samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample a Prometheus endpoint on `port` serves, by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
