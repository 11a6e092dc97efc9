"""`health_check` extension: an HTTP endpoint for liveness/readiness probes.

Answers 200 while the pipeline runs and 503 once shutdown began, with the same JSON
shape as the Collector's health_check extension. With `auth`, a request without the
authenticator's credentials is answered 401. A request it cannot parse is a client's
error: a line per interval, not a traceback per request (`core.client_errors`).
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import Field, field_validator

from spanscore.core.auth import ServerAuthenticator, ServerAuthSettings, refusal, server_authenticator
from spanscore.core.client_errors import ClientErrorLog, ServerLog
from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.endpoints import split_host_port, validate_endpoint

log = logging.getLogger("spanscore.health_check")


class HealthCheckConfig(ComponentConfig):
    endpoint: str = "127.0.0.1:13133"
    path: str = Field(default="/", pattern=r"^/")
    auth: ServerAuthSettings | None = None

    _endpoint = field_validator("endpoint")(validate_endpoint)


class HealthCheck:
    def __init__(self, component_id: str, config: HealthCheckConfig):
        self.id = component_id
        self.config = config
        self.healthy = False
        self.port: int | None = None
        self.authenticator: ServerAuthenticator | None = None
        self._started = time.time()
        self._runner: web.AppRunner | None = None
        self.client_errors = ClientErrorLog(log)

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        self.authenticator = server_authenticator(self.config.auth, host)
        app = web.Application()
        app.router.add_get(self.config.path, self._status)
        server_log = ServerLog(
            logging.getLogger("aiohttp.server"), self.client_errors, "health_check 400 unparsable request", _unparsable
        )
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=server_log)
        await self._runner.setup()
        address, port = split_host_port(self.config.endpoint)
        site = web.TCPSite(self._runner, address or None, port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise OSError(f"health_check cannot listen on {self.config.endpoint}: {exc.strerror or exc}") from None
        self.port = self._runner.addresses[0][1]

    async def shutdown(self, deadline: float) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self.client_errors.flush()

    def pipeline_ready(self) -> None:
        self.healthy = True

    def pipeline_not_ready(self) -> None:
        self.healthy = False

    async def _status(self, request: web.Request) -> web.Response:
        authenticator = self.authenticator
        if authenticator is not None and (problem := refusal(authenticator, request.headers)) is not None:
            self.client_errors.record(f"health_check 401 {problem}", f"from {request.remote}")
            return web.Response(
                status=401, text=problem + "\n", headers={"WWW-Authenticate": authenticator.challenge()}
            )
        body = {
            "status": "Server available" if self.healthy else "Server not available",
            "upSince": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._started)),
            "uptime": f"{time.time() - self._started:.0f}s",
        }
        return web.json_response(body, status=200 if self.healthy else 503)


def _unparsable(exc: BaseException) -> str | None:
    """What aiohttp found wrong in a request it could not parse, on one line."""
    if isinstance(exc, HttpProcessingError) and exc.code < 500:
        return " ".join(exc.message.split())
    return None


FACTORY = ComponentFactory("extension", "health_check", HealthCheckConfig, HealthCheck)
