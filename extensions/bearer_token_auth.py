"""`bearertokenauth` extension: a shared bearer token, as the Collector's extension of that name.

Server side (a receiver's `auth`), a request must carry `Authorization: <scheme> <token>`
(gRPC metadata `authorization`) once (two are refused before this extension is asked:
`core.auth.refusal`); the token is compared in constant time. Client side (an
exporter's `auth`), the same header is sent. The token is written inline (`token`) or
read from `filename`, which is read again when it changes, so a rotated token is taken
without a restart by receivers; exporters read it once, at start.

Neither the configured token nor a presented one is ever logged or put in an error.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, model_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host

log = logging.getLogger("spanscore.bearertokenauth")

DEFAULT_SCHEME = "Bearer"


class BearerTokenAuthConfig(ComponentConfig):
    token: SecretStr | None = None
    filename: str | None = None
    scheme: str = Field(default=DEFAULT_SCHEME, pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

    @model_validator(mode="before")
    @classmethod
    def _token_is_text(cls, data: Any) -> Any:
        # Checked on the whole mapping, so the error does not quote the value: a token
        # that YAML or `${env:...}` read as a number would otherwise be printed. Its text
        # is lost by then (`007` became 7), so it is refused rather than converted.
        if isinstance(data, dict) and data.get("token") is not None and not isinstance(data["token"], str):
            raise ValueError("token must be text: quote it, or keep it in a file named by filename")
        return data

    @model_validator(mode="after")
    def _one_source(self) -> BearerTokenAuthConfig:
        if (self.token is None) == (self.filename is None):
            raise ValueError("set one of token and filename")
        if self.token is not None and not self.token.get_secret_value().strip():
            raise ValueError("token is empty")
        if self.filename is not None and not Path(self.filename).is_file():
            raise ValueError(f"filename {self.filename!r} does not exist")
        return self


class BearerTokenAuth:
    """A `ServerAuthenticator` and a `ClientAuthenticator` (spanscore.core.auth).

    Threading: called on the collector's event loop. Lifecycle: `start` reads the token
    file, so a missing or empty one stops the service from starting; nothing to release.
    """

    def __init__(self, component_id: str, config: BearerTokenAuthConfig):
        self.id = component_id
        self.config = config
        self._token = config.token.get_secret_value().strip().encode() if config.token is not None else b""
        self._file_version: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._problem: str | None = None  # the last failure reading the file, logged once

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if self.config.filename is not None and not self.token():
            raise OSError(f"bearertokenauth {self.id}: cannot read a token from {self.config.filename}")

    async def shutdown(self, deadline: float) -> None:
        return None

    def authenticate(self, headers: Mapping[str, str]) -> bool:
        scheme, _, presented = headers.get("authorization", "").strip().partition(" ")
        token = self.token()
        try:
            # A header's bytes that are not UTF-8 arrive as lone surrogates (aiohttp
            # decodes with surrogateescape), which this gives back as they were sent.
            candidate = presented.strip().encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no byte stands for: no token is that
            return False
        # Auth schemes are case-insensitive (RFC 9110); the token is not.
        return bool(token) and scheme.lower() == self.config.scheme.lower() and hmac.compare_digest(candidate, token)

    def challenge(self) -> str:
        return self.config.scheme

    def client_headers(self) -> dict[str, str]:
        token = self.token()
        if not token:
            raise OSError(f"bearertokenauth {self.id}: cannot read a token from {self.config.filename}")
        return {"authorization": f"{self.config.scheme} {token.decode()}"}

    def token(self) -> bytes:
        """The current token; empty while the file has never been read."""
        path = self.config.filename
        if path is None:
            return self._token
        try:
            stat = os.stat(path)
            version = (stat.st_mtime_ns, stat.st_size)
            if version != self._file_version:
                self._file_version = version
                token = Path(path).read_bytes().strip()
                if not token:
                    raise ValueError("the file is empty")
                if self._token and token != self._token:
                    log.info("bearertokenauth %s: %s changed; using the new token", self.id, path)
                self._token = token
            self._problem = None
        except (OSError, ValueError) as exc:
            problem = exc.strerror if isinstance(exc, OSError) else str(exc)
            if problem != self._problem:  # once per problem, not once per request
                self._problem = problem
                # A file being rewritten must not lock every client out.
                log.warning(
                    "bearertokenauth %s: cannot read a token from %s: %s%s",
                    self.id,
                    path,
                    problem,
                    "; keeping the previous one" if self._token else "",
                )
        return self._token


FACTORY = ComponentFactory("extension", "bearertokenauth", BearerTokenAuthConfig, BearerTokenAuth)
