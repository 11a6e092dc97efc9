"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, Ollama,
llama.cpp server, LiteLLM, ...), through the `openai` package.

Texts are sent in batches of `batch_size` per request, at most `max_concurrency`
requests at a time; vectors come back in any order and are put back in input order by
their `index`, then L2-normalized (not every server returns unit vectors). Empty or
whitespace-only texts are never sent (the API rejects empty input): they get zero rows.

Retries are done here, with the client's own retries off (`max_retries=0`), because:
the same policy then covers the sync and async paths and every major version of the
`openai` package (whose built-in backoff constants and Retry-After cap have changed
between releases); the delays are configurable and testable; and a `Retry-After` longer
than `max_retry_after_s` fails the batch at once instead of parking a scoring task for
minutes. Retried: connection errors, timeouts, 408, 409, 429 and 5xx. A server's
`Retry-After`/`retry-after-ms` is honoured, otherwise the delay is exponential with full
jitter; the timing is `processors.openai_retry`, shared with the judge client.

Outages (connection errors, timeouts, 5xx) go through a `CircuitBreaker`, as the judge's
do: retried without counting against `max_retries`, five in a row open the breaker, which
holds every call and probes the server until it answers; a call fails only after
`max_wait_s` (`max_embedder_wait`). Server messages in errors and logs are scrubbed of
secret shapes and cut short (`core.redaction.scrub`).

Texts are redacted before they leave, as the judge's prompts are (`redaction`: the
built-in secret shapes by default; `redact: false` sends them as recorded).

When no vector's width is known yet and every text of a call is empty, one probe text is
embedded to learn it (set `dimensions` to avoid that request).

Threading: `embed` keeps one AsyncOpenAI client and one semaphore per event loop (an
asyncio object cannot be shared between loops); `embed_sync` uses a thread-safe sync
client and runs a call's batches on up to `max_concurrency` threads.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import openai

from spanscore.core.durations import format_duration
from spanscore.core.redaction import Redaction, safe_url, scrub
from spanscore.processors.circuit_breaker import DEFAULT_MAX_WAIT_S, BreakerState, CircuitBreaker, Hold, Unreachable
from spanscore.processors.embedders.base import Embedder, l2_normalize
from spanscore.processors.openai_retry import RetryPolicy, outage_reason, retry_after_s

DEFAULT_MODEL = "text-embedding-3-small"
DEFAULT_BATCH_SIZE = 128
DEFAULT_MAX_CONCURRENCY = 4
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_BACKOFF_S = 8.0  # embeddings sit on the scoring path: give up sooner than the judge
DEFAULT_RETRY = RetryPolicy(max_retries=DEFAULT_MAX_RETRIES, max_backoff_s=DEFAULT_MAX_BACKOFF_S)
API_KEY_ENV = "OPENAI_API_KEY"
RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
PROBE_TEXT = "dimension probe"

_log = logging.getLogger(__name__)


class EmbeddingRequestError(RuntimeError):
    """A batch could not be embedded; `attempts` requests were made, `status` is the last
    HTTP status (None for connection errors and timeouts)."""

    def __init__(self, message: str, *, attempts: int, status: int | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.status = status


class MissingAPIKeyError(ValueError):
    """No API key in config nor in the environment."""


def is_retryable(error: BaseException) -> bool:
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code in RETRYABLE_STATUS or error.status_code >= 500
    return False


def _status(error: BaseException) -> int | None:
    return error.status_code if isinstance(error, openai.APIStatusError) else None


def _describe(error: BaseException) -> str:
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {scrub(error.message)}"
    if isinstance(error, openai.APITimeoutError):
        return "timed out"
    return scrub(f"{type(error).__name__}: {error}")


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible endpoint (see the module docstring)."""

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        seed: int | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        redaction: Redaction | None = None,
    ):
        api_key = api_key or os.environ.get(API_KEY_ENV)
        if not api_key:
            raise MissingAPIKeyError(
                f"the openai embedder needs an API key: set api_key in its config or the {API_KEY_ENV} "
                "environment variable (servers that ignore keys accept any non-empty value)"
            )
        if batch_size < 1 or max_concurrency < 1:
            raise ValueError("batch_size and max_concurrency must be at least 1")
        if dimensions is not None and dimensions < 1:
            raise ValueError(f"dimensions must be at least 1, got {dimensions}")
        self.model = model
        self.base_url = base_url
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.retry = retry or DEFAULT_RETRY
        self.redaction = redaction if redaction is not None else Redaction()
        self.name = f"openai/{model}" + (f"/d{dimensions}" if dimensions else "")
        self._where = safe_url(base_url) if base_url else "the OpenAI API"
        self.breaker = CircuitBreaker(f"embedder {model!r} at {self._where}",
                                      probe_delay_s=self.retry.initial_backoff_s,
                                      max_probe_delay_s=self.retry.max_backoff_s, max_wait_s=max_wait_s)
        self.requests_made = 0  # every HTTP attempt, retries included
        self._api_key = api_key
        self._width: int | None = dimensions
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._sync_client: openai.OpenAI | None = None
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    # -- clients ---------------------------------------------------------------------
    def _client_args(self) -> dict[str, Any]:
        return {"api_key": self._api_key, "base_url": self.base_url, "timeout": self.timeout_s, "max_retries": 0}

    def _client(self) -> openai.OpenAI:
        with self._lock:
            if self._sync_client is None:
                self._sync_client = openai.OpenAI(**self._client_args())
            return self._sync_client

    def _async_state(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        state = self._async.get(loop)
        if state is None:
            state = (openai.AsyncOpenAI(**self._client_args()), asyncio.Semaphore(self.max_concurrency))
            self._async[loop] = state
        return state

    async def close(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        state = self._async.pop(loop, None) if loop is not None else None
        if state is not None:
            await state[0].close()
        with self._lock:
            client, self._sync_client = self._sync_client, None
        if client is not None:
            client.close()

    # -- embedding -------------------------------------------------------------------
    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        positions, batches = self._plan(texts)
        if not batches:
            if self._width is None:
                await self._request_async([PROBE_TEXT])
            return self._assemble(len(texts), positions, [])
        results = await asyncio.gather(*(self._request_async(batch) for batch in batches))
        return self._assemble(len(texts), positions, results)

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        positions, batches = self._plan(texts)
        if not batches:
            if self._width is None:
                self._request_sync([PROBE_TEXT])
            return self._assemble(len(texts), positions, [])
        if len(batches) == 1:
            return self._assemble(len(texts), positions, [self._request_sync(batches[0])])
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(batches))) as pool:
            results = list(pool.map(self._request_sync, batches))
        return self._assemble(len(texts), positions, results)

    def _plan(self, texts: Sequence[str]) -> tuple[list[int], list[list[str]]]:
        positions = [i for i, text in enumerate(texts) if text and not text.isspace()]
        redact = self.redaction.text if self.redaction.enabled else None
        wanted = [redact(texts[i]) if redact else texts[i] for i in positions]
        return positions, [wanted[i:i + self.batch_size] for i in range(0, len(wanted), self.batch_size)]

    def _assemble(self, n: int, positions: list[int], results: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((n, self._width or 0), dtype=np.float32)
        if results:
            out[positions] = l2_normalize(np.concatenate(results))
        return out

    async def _request_async(self, batch: list[str]) -> np.ndarray:
        client, semaphore = self._async_state()
        retry = 0
        hold = Hold()
        while True:
            try:
                probe = await self.breaker.admit(hold)
            except Unreachable as outage:
                raise self._unreachable(outage, len(batch), retry) from None
            try:
                async with semaphore:  # a backoff sleep does not hold a slot
                    if not probe and self.breaker.state is not BreakerState.CLOSED:
                        continue  # it opened while this call waited for a slot: wait for it instead
                    with self._lock:
                        self.requests_made += 1
                    try:
                        response = await client.embeddings.create(**self._params(batch))
                    except openai.OpenAIError as error:
                        failure = error
                        self._report(probe, error)
                    else:
                        self.breaker.answered()
                        return self._vectors(response, len(batch))
            finally:
                self.breaker.abandon(probe)  # a probe stopped before it reported (cancelled); else a no-op
            delay = self._next_delay(retry, failure, len(batch), hold)
            if delay > 0:
                await asyncio.sleep(delay)
            retry += 1

    def _request_sync(self, batch: list[str]) -> np.ndarray:
        client = self._client()
        retry = 0
        hold = Hold()
        while True:
            try:
                probe = self.breaker.admit_sync(hold)
            except Unreachable as outage:
                raise self._unreachable(outage, len(batch), retry) from None
            try:
                with self._lock:
                    self.requests_made += 1
                try:
                    response = client.embeddings.create(**self._params(batch))
                except openai.OpenAIError as error:
                    failure = error
                    self._report(probe, error)
                else:
                    self.breaker.answered()
                    return self._vectors(response, len(batch))
            finally:
                self.breaker.abandon(probe)
            time.sleep(self._next_delay(retry, failure, len(batch), hold))
            retry += 1

    def _report(self, probe: bool, error: BaseException) -> None:
        reason = outage_reason(error, self.timeout_s)
        if reason is None:
            self.breaker.answered()
        else:
            self.breaker.failed(probe, reason, retry_after_s(error))

    def _params(self, batch: list[str]) -> dict[str, Any]:
        # base64 is a quarter of the JSON float text; servers that ignore it send floats.
        params: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "base64"}
        if self.dimensions is not None:
            params["dimensions"] = self.dimensions
        return params

    def _next_delay(self, retry: int, error: BaseException, size: int, hold: Hold) -> float:
        """The wait before the next attempt (0: the breaker decides), or raise
        EmbeddingRequestError. An outage holds the call unless the server answered others
        since it began and this call's retries are used up: then the failures are its own."""
        attempts = retry + 1
        if outage_reason(error) is not None and not (retry >= self.retry.max_retries
                                                      and self.breaker.answered_since(hold)):
            try:
                left_s = self.breaker.remaining_s(hold)
            except Unreachable as outage:
                raise self._unreachable(outage, size, attempts) from error
            if self.breaker.state is not BreakerState.CLOSED:
                return 0.0
            with self._lock:
                delay = min(self.retry.outage_wait_s(retry, retry_after_s(error), self._rng), left_s)
        else:
            with self._lock:
                delay = self.retry.wait_s(retry, retry_after_s(error), self._rng) if is_retryable(error) else None
        if delay is None:
            if not is_retryable(error):
                why = "not retryable"
            elif retry >= self.retry.max_retries:
                why = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
            else:
                why = f"Retry-After exceeds max_retry_after_s={self.retry.max_retry_after_s:g}"
            raise EmbeddingRequestError(
                f"embedding {size} text{'s' if size > 1 else ''} with {self.model!r} at "
                f"{self._where} failed ({why}): {_describe(error)}",
                attempts=attempts, status=_status(error),
            ) from error
        _log.warning("embeddings request failed (%s); retry %d in %.2f s", _describe(error), attempts, delay)
        return delay

    def _unreachable(self, outage: Unreachable, size: int, attempts: int) -> EmbeddingRequestError:
        return EmbeddingRequestError(
            f"embedding {size} text{'s' if size > 1 else ''}: {self.breaker.name} unreachable for "
            f"{format_duration(outage.waited_s)} (max_embedder_wait): {outage.reason}", attempts=attempts)

    def _vectors(self, response: Any, expected: int) -> np.ndarray:
        items = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in items] != list(range(expected)):
            raise EmbeddingRequestError(
                f"the embeddings response for {expected} texts had indexes "
                f"{[item.index for item in response.data]}", attempts=1)
        rows = [_decode(item.embedding) for item in items]
        widths = {row.size for row in rows}
        if len(widths) != 1 or 0 in widths:
            raise EmbeddingRequestError(f"the embeddings response had vectors of widths {sorted(widths)}", attempts=1)
        width = widths.pop()
        with self._lock:
            if self._width is None:
                self._width = width
        if width != self._width:
            raise EmbeddingRequestError(
                f"{self.model!r} returned {width}-dimensional vectors after {self._width}-dimensional ones",
                attempts=1)
        return np.stack(rows)


def _decode(embedding: Any) -> np.ndarray:
    if isinstance(embedding, str):
        return np.frombuffer(base64.b64decode(embedding), dtype="<f4").astype(np.float32)
    return np.asarray(embedding, dtype=np.float32).ravel()


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT_S",
    "EmbeddingRequestError",
    "MissingAPIKeyError",
    "OpenAIEmbedder",
    "RetryPolicy",
    "is_retryable",
    "retry_after_s",
]
