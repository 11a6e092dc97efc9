"""`prometheus` exporter: the score metrics on a Prometheus scrape endpoint (`/metrics`).

Metrics only: list it under `service.pipelines.metrics`. Each instance has its own
registry, so nothing else in the process leaks into the scrape.
"""

from __future__ import annotations

import logging

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, start_http_server
from pydantic import field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.endpoints import split_host_port, validate_endpoint

log = logging.getLogger("spanscore.exporters.prometheus")


class PrometheusExporterConfig(ComponentConfig):
    endpoint: str = "127.0.0.1:9464"

    _endpoint = field_validator("endpoint")(validate_endpoint)


class PrometheusReader(PrometheusMetricReader):
    """A metric reader that also serves its registry over HTTP until shut down."""

    def __init__(
        self, component_id: str, config: PrometheusExporterConfig, interval_s: float = 0.0, host: Host = NO_EXTENSIONS
    ):
        # Scraped on demand: the export interval does not apply.
        self._registry = CollectorRegistry()
        super().__init__(registry=self._registry, scope_info_enabled=False)
        address, port = split_host_port(config.endpoint)
        try:
            self._server, self._thread = start_http_server(port, addr=address or "0.0.0.0", registry=self._registry)
        except OSError as exc:
            super().shutdown()
            raise OSError(f"prometheus exporter cannot listen on {config.endpoint}: {exc.strerror or exc}") from None
        self.port = self._server.server_port
        log.info("Prometheus scrape endpoint on http://%s:%d/metrics", address or "0.0.0.0", self.port)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._server.shutdown()
        self._server.server_close()
        super().shutdown(timeout_millis=timeout_millis, **kwargs)


FACTORY = ComponentFactory("exporter", "prometheus", PrometheusExporterConfig, None, PrometheusReader)
