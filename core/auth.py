"""Authentication in the Collector's shape: `auth: {authenticator: <extension id>}`.

A receiver's protocol or an exporter names an extension (`bearertokenauth/agents`) that
does the work; the config checks that it is defined, listed in `service.extensions` and
of the right side. Components find it through the host at start: a receiver asks it on
every request; an exporter adds its headers to its own `headers` (`client_headers`), so
every signal it sends (traces, score metrics, evaluation events) carries them. An
authenticator's component factory must build it from a class implementing
`ServerAuthenticator` or `ClientAuthenticator`, which the config checks.

Endpoints that answer requests ask `refusal`, which refuses a request carrying the
Authorization header (gRPC metadata `authorization`) more than once before any
authenticator sees it. Which of two values counts is ambiguous: the Collector's
bearertokenauth takes the first, a gRPC server's metadata read as a mapping the last,
and a proxy in front may have checked either; RFC 9110 lets a sender send the field
once. Refusing leaves no credential to choose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from multidict import MultiMapping
from pydantic import BaseModel, Field

from spanscore.core.component import ComponentConfig, Host

INVALID_CREDENTIALS = "missing or invalid credentials"
AMBIGUOUS_CREDENTIALS = "more than one authorization header; send the credentials once"


class AuthSettings(ComponentConfig):
    authenticator: str = Field(min_length=1)  # an extension id, `type[/name]`


class ServerAuthSettings(AuthSettings):
    """The `auth` of a component that answers requests (a scrape or health endpoint) but
    is not a receiver: its authenticator checks the requests it receives."""


@runtime_checkable
class ServerAuthenticator(Protocol):
    """Decides from a request's headers alone, before its body is read.

    Threading: called on the collector's event loop for every request; must not block.
    """

    def authenticate(self, headers: Mapping[str, str]) -> bool:
        """Whether the request may go on; `headers` are looked up by lowercase name."""
        ...

    def challenge(self) -> str:
        """The `WWW-Authenticate` value an HTTP client that failed gets."""
        ...


def refusal(authenticator: ServerAuthenticator, headers: MultiMapping[str]) -> str | None:
    """Why a request with `headers` (every value of each, names looked up in lowercase)
    may not go on, as its client is told (never quoting a credential); None when it may."""
    if len(headers.getall("authorization", ())) > 1:
        return AMBIGUOUS_CREDENTIALS
    return None if authenticator.authenticate(headers) else INVALID_CREDENTIALS


@runtime_checkable
class ClientAuthenticator(Protocol):
    def client_headers(self) -> dict[str, str]:
        """Headers (gRPC metadata) to send with every request, lowercase names."""
        ...


def auth_references(config: BaseModel, where: str) -> list[tuple[str, AuthSettings]]:
    """Every `AuthSettings` in `config`, at any depth, with its key path."""
    found = []
    for name in type(config).model_fields:
        value = getattr(config, name)
        if isinstance(value, AuthSettings):
            found.append((f"{where}.{name}.authenticator", value))
        elif isinstance(value, BaseModel):
            found.extend(auth_references(value, f"{where}.{name}"))
    return found


def server_authenticator(auth: AuthSettings | None, host: Host) -> ServerAuthenticator | None:
    """The running authenticator `auth` names, or None without `auth`."""
    return None if auth is None else host.extension(auth.authenticator, ServerAuthenticator)


def client_headers(config: BaseModel, host: Host) -> dict[str, str]:
    """An exporter's `headers` with those of the authenticator its `auth` names; its
    header replaces one written by hand under any capitalisation. Raises OSError when the
    authenticator cannot produce them (its token file is unreadable)."""
    headers = dict(getattr(config, "headers", {}))
    auth = getattr(config, "auth", None)
    if auth is None:
        return headers
    authenticator = host.extension(auth.authenticator, ClientAuthenticator)
    added = authenticator.client_headers()
    return {k: v for k, v in headers.items() if k.lower() not in added} | added
