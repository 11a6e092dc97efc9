"""What the HTTP exporters share: their aiohttp session, one POST, and reading `Retry-After`."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping

import aiohttp

from spanscore.exporters.base import ExportError
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


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: Mapping[str, str], retryable: Callable[[int], bool]
) -> tuple[bytes, str]:
    """POST `body`; the answer's bytes and content type. Raises ExportError: retryable for
    a connection failure, a timeout or a status `retryable` names (with the server's
    Retry-After), for good for any other status of 300 and above."""
    try:
        async with session.post(url, data=body, headers=headers) as response:
            payload = await response.read()
            if retryable(response.status):
                raise ExportError(
                    f"{url}: HTTP {response.status}", True, retry_after(response.headers.get("Retry-After"))
                )
            if response.status >= 300:
                raise ExportError(f"{url}: HTTP {response.status}: {payload[:200]!r}", False)
            return payload, response.content_type
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ExportError(f"{url}: {type(exc).__name__}: {exc}", True) from None
