"""What the HTTP exporters share: their aiohttp session and reading `Retry-After`."""

from __future__ import annotations

import email.utils
import time

import aiohttp

from spanscore.exporters.tls import TlsClientConfig


def client_session(url: str, tls: TlsClientConfig, connections: int, timeout_s: float) -> aiohttp.ClientSession:
    """A session for `url`, with the TLS settings when it is https, at most `connections` open."""
    ssl = tls.ssl_context() if url.startswith("https://") else None
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=ssl if ssl is not None else True, limit=connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    )


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None
