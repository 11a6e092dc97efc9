"""Retry timing and outage detection shared by the clients of OpenAI-compatible servers
(embedder, judge).

Exponential backoff with full jitter (uniform in [0, min(max_backoff, initial * 2**n)]),
so clients that failed together do not retry together; a server's `Retry-After` or
`retry-after-ms` wins, with a little jitter, unless it asks for more than
`max_retry_after_s`, in which case waiting would only park work: fail at once.

Retried errors (`is_retryable`): connection errors, timeouts, 408, 409, 429 and 5xx; a
client may retry more of its own (the judge, a malformed answer).

An outage is a failure that says the server is not there to answer: no connection, no
answer in time, or HTTP 5xx. Anything else (a 4xx, a reply that does not parse) is the
server answering, and says nothing about whether it is up.

An overload (`is_overload`) says the server is up with more requests than it takes: a
timeout (they queue at it), 429 or 503. An adaptive concurrency limit halves on it.
"""

from __future__ import annotations

import email.utils
import enum
import math
import random
import time
from dataclasses import dataclass

import openai
from pydantic import Field, model_validator

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration
from spanscore.core.redaction import scrub

RETRY_AFTER_JITTER = 0.1  # up to 10% on top of what the server asked for
RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
OVERLOAD_STATUS = frozenset({429, 503})  # "too many requests", "busy"


class GiveUp(enum.Enum):
    """Why a failed call is not tried again."""

    NOT_RETRYABLE = enum.auto()
    RETRIES_SPENT = enum.auto()  # `max_retries` retries made
    WAIT_TOO_LONG = enum.auto()  # the server asked to wait more than `max_retry_after_s`


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 20.0
    max_retry_after_s: float = 60.0

    def backoff_s(self, retry: int, rng: random.Random) -> float:
        """Full-jitter backoff before retry number `retry` (0-based)."""
        return rng.uniform(0.0, min(self.max_backoff_s, self.initial_backoff_s * 2.0**retry))

    def give_up(self, retryable: bool, retry: int, retry_after: float | None) -> GiveUp | None:
        """Why retry number `retry` must not happen, or None when it may. An outage is
        not asked: the circuit breaker bounds how long it holds a call."""
        if not retryable:
            return GiveUp.NOT_RETRYABLE
        if retry >= self.max_retries:
            return GiveUp.RETRIES_SPENT
        if retry_after is not None and retry_after > self.max_retry_after_s:
            return GiveUp.WAIT_TOO_LONG
        return None

    def wait_s(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number `retry`: what the server asked for, else
        the backoff."""
        if retry_after is None:
            return self.backoff_s(retry, rng)
        return retry_after * (1.0 + rng.uniform(0.0, RETRY_AFTER_JITTER))


class RetrySettings(ComponentConfig):
    """The retry keys of a client's config; subclasses may change the defaults."""

    max_retries: int = Field(RetryPolicy.max_retries, ge=0)
    initial_backoff: Duration = Field(RetryPolicy.initial_backoff_s, gt=0)
    max_backoff: Duration = Field(RetryPolicy.max_backoff_s, gt=0)
    max_retry_after: Duration = RetryPolicy.max_retry_after_s

    @model_validator(mode="after")
    def _backoff_bounds(self) -> RetrySettings:
        if self.initial_backoff > self.max_backoff:
            raise ValueError(f"initial_backoff ({self.initial_backoff:g}s) exceeds max_backoff ({self.max_backoff:g}s)")
        return self

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.initial_backoff, self.max_backoff, self.max_retry_after)


def retry_after_s(error: BaseException) -> float | None:
    """The wait a `Retry-After` (seconds or HTTP date) or `retry-after-ms` header asks for."""
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    header = headers.get("retry-after")
    if header is None:
        return None
    try:
        value = float(header)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())
    return value if math.isfinite(value) and value >= 0 else None


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUS or error.status_code >= 500
    return False


def is_overload(error: BaseException) -> bool:
    """Whether an error says the server has more requests than it can take now: a timeout
    (requests queue at it), 429 or 503."""
    if isinstance(error, openai.APITimeoutError):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code in OVERLOAD_STATUS


def outage_reason(error: BaseException, timeout_s: float | None = None) -> str | None:
    """Why the server looks down ("connection refused", "timed out after 30s", "HTTP 503:
    Loading model"), or None when the error is an answer from a server that is up."""
    if isinstance(error, openai.APITimeoutError):
        return "timed out" if timeout_s is None else f"timed out after {timeout_s:g}s"
    if isinstance(error, openai.APIConnectionError):
        return _connection_reason(error)
    if isinstance(error, openai.APIStatusError) and error.status_code >= 500:
        return f"HTTP {error.status_code}: {scrub(error.message)}"
    return None


def _connection_reason(error: BaseException) -> str:
    """The socket-level cause of a connection error (the client's own message is only
    "Connection error.")."""
    deepest, seen = error, set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        deepest = cause
        cause = cause.__cause__ or cause.__context__
    return f"connection failed: {scrub(str(deepest) or type(deepest).__name__)}"
