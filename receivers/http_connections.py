"""The OTLP/HTTP receiver's connections: how many it keeps, and how long each may wait.

aiohttp parses the requests; each connection's protocol is wrapped here to bound what
aiohttp leaves open: a connection past `max_connections` is answered 503 and closed; a
request's headers must arrive within `read_header_timeout` of its first byte (of the
connection's start, for the first request), else 408 and the connection is closed; a
kept-alive connection waits `idle_timeout` for its next request. The request handler
learns its request's deadline for the body (`read_timeout` from the request's first
byte) from `body_deadline`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import cast

from aiohttp import web

from spanscore.receivers.limits import HttpLimits

log = logging.getLogger("spanscore.receivers.http")

_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
_DEADLINE = web.RequestKey("body_deadline", float)

_HEADERS, _REQUEST, _IDLE = "headers", "request", "idle"


class Connections:
    """One server's open connections: the protocol factory for `loop.create_server`,
    and the aiohttp middleware that tells a connection where its requests begin and end.
    Threading: the collector's event loop."""

    def __init__(self, limits: HttpLimits):
        self.limits = limits
        self.handler_factory: Callable[[], asyncio.Protocol] | None = None  # aiohttp's, set by the site
        self.open: dict[asyncio.BaseTransport, _Connection] = {}
        self.refused = 0
        self.timed_out = 0
        self._full = False

    def __call__(self) -> asyncio.Protocol:
        return _Connection(self)

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        connection = self.open.get(request.transport) if request.transport is not None else None
        loop = asyncio.get_running_loop()
        began = loop.time() if connection is None else connection.request_started()
        request[_DEADLINE] = began + self.limits.read_timeout
        try:
            return await handler(request)
        finally:
            if connection is not None:
                connection.request_finished()

    def _admit(self, transport: asyncio.Transport) -> bool:
        if len(self.open) < self.limits.max_connections:
            return True
        self.refused += 1
        if not self._full:
            self._full = True
            log.warning(
                "OTLP/HTTP receiver holds %d connections, its max_connections; refusing new ones (503)",
                len(self.open),
            )
        transport.write(_BUSY)
        transport.close()
        return False

    def _closed(self, connection: _Connection) -> None:
        if connection.transport is not None:
            self.open.pop(connection.transport, None)
        if self._full and len(self.open) < self.limits.max_connections:
            self._full = False
            log.info("OTLP/HTTP receiver is below max_connections again; taking connections")


def body_deadline(request: web.Request) -> float:
    """The event-loop time by which `request`'s body must have arrived."""
    return request[_DEADLINE]


class _Connection(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection with the header and idle timers."""

    def __init__(self, connections: Connections):
        self._connections = connections
        self._inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._phase = _HEADERS
        self._began = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connections = self._connections
        if connections.handler_factory is None:
            raise RuntimeError("a connection arrived before the site started")
        # A stream protocol's transport is a Transport; typeshed types it as the base class.
        stream = cast(asyncio.Transport, transport)
        if not connections._admit(stream):
            return
        self.transport = stream
        connections.open[stream] = self
        self._inner = connections.handler_factory()
        self._inner.connection_made(stream)
        self._start_headers()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._phase == _IDLE and data:
            self._start_headers()
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._inner is None:
            return
        self._connections._closed(self)
        inner, self._inner = self._inner, None
        inner.connection_lost(exc)

    def request_started(self) -> float:
        """The headers are in: the handler takes over. Returns when the request began."""
        self._cancel_timer()
        self._phase = _REQUEST
        return self._began

    def request_finished(self) -> None:
        self._phase = _IDLE
        self._arm(self._connections.limits.idle_timeout)

    def _start_headers(self) -> None:
        self._phase = _HEADERS
        self._began = asyncio.get_running_loop().time()
        self._arm(self._connections.limits.read_header_timeout)

    def _arm(self, seconds: float) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if self._phase == _HEADERS:
            self._connections.timed_out += 1
            transport.write(_TIMED_OUT)
        transport.close()


class LimitedSite(web.BaseSite):
    """A TCP site whose connections go through `Connections`."""

    def __init__(self, runner: web.AppRunner, connections: Connections, host: str | None, port: int, ssl_context=None):
        super().__init__(runner, ssl_context=ssl_context)
        self._connections = connections
        self._host = host
        self._port = port
        self._listening: asyncio.Server | None = None  # the site's _server, typed as what create_server returns

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host or '0.0.0.0'}:{self.port}"

    @property
    def port(self) -> int:
        """The port listened on (the real one when 0 was asked for)."""
        return self._listening.sockets[0].getsockname()[1] if self._listening is not None else self._port

    async def start(self) -> None:
        await super().start()
        self._connections.handler_factory = self._runner.server
        loop = asyncio.get_running_loop()
        self._server = self._listening = await loop.create_server(
            self._connections,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            # The TLS handshake comes before any header: bound it the same way.
            ssl_handshake_timeout=self._connections.limits.read_header_timeout if self._ssl_context else None,
        )
