"""`prometheus` exporter: the score metrics on a Prometheus scrape endpoint (`/metrics`).

Metrics only: list it under `service.pipelines.metrics`. Each instance has its own
registry, so nothing else in the process leaks into the scrape. With `auth`, a scrape
without the authenticator's credentials is answered 401.
"""

from __future__ import annotations

import logging
import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from multidict import CIMultiDict
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from pydantic import field_validator

from spanscore.core.auth import ServerAuthenticator, ServerAuthSettings, refusal, server_authenticator
from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.endpoints import split_host_port, validate_endpoint

log = logging.getLogger("spanscore.exporters.prometheus")


class PrometheusExporterConfig(ComponentConfig):
    endpoint: str = "127.0.0.1:9464"
    auth: ServerAuthSettings | None = None

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
        app = make_wsgi_app(self._registry)
        authenticator = server_authenticator(config.auth, host)
        if authenticator is not None:
            app = _authenticated(app, authenticator)
        try:
            self._server = _serve(address or "0.0.0.0", port, app)
        except OSError as exc:
            super().shutdown()
            raise OSError(f"prometheus exporter cannot listen on {config.endpoint}: {exc.strerror or exc}") from None
        self.port = self._server.server_port
        log.info("Prometheus scrape endpoint on http://%s:%d/metrics", address or "0.0.0.0", self.port)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._server.shutdown()
        self._server.server_close()
        super().shutdown(timeout_millis=timeout_millis, **kwargs)


# A scrape is one short request: a connection that sends nothing for this long is closed,
# and past this many at once a new one is closed unanswered, so clients that open
# connections and send nothing cannot hold a thread each for ever.
SCRAPE_TIMEOUT_S = 60.0
MAX_SCRAPE_CONNECTIONS = 100


class _QuietHandler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_S  # applied to the connection's socket by socketserver

    def log_message(self, format, *args) -> None:
        return None  # no line on standard error per scrape


class _BoundedServer(ThreadingWSGIServer):
    """A thread per scrape, at most `max_connections` at once."""

    max_connections = MAX_SCRAPE_CONNECTIONS

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(self.max_connections)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _serve(address: str, port: int, app) -> ThreadingWSGIServer:
    """`app` served from a daemon thread, a thread per scrape, bounded in number and time."""
    family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    server_class = type("PrometheusServer", (_BoundedServer,), {"address_family": family})
    server = make_server(address, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="prometheus-scrape", daemon=True).start()
    return server


def _authenticated(app, authenticator: ServerAuthenticator):
    """`app` behind `authenticator`: 401 with its challenge for a request it refuses."""

    def guarded(environ, start_response):
        # WSGI joins a header sent twice into one value with a comma: no credential matches that.
        headers = CIMultiDict(
            (key[5:].replace("_", "-").lower(), value) for key, value in environ.items() if key.startswith("HTTP_")
        )
        problem = refusal(authenticator, headers)
        if problem is not None:
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", authenticator.challenge()), ("Content-Type", "text/plain; charset=utf-8")],
            )
            return [problem.encode() + b"\n"]
        return app(environ, start_response)

    return guarded


FACTORY = ComponentFactory("exporter", "prometheus", PrometheusExporterConfig, None, PrometheusReader)
