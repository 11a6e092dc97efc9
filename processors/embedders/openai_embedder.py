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
jitter; the timing is `processors.openai_endpoint.retry`, shared with the judge client.

Answers are read within bounds: at most `MAX_ANSWER_BYTES_PER_TEXT` a text of the batch
(room for 8,192 dimensions as JSON floats), within `timeout` from the request's start
(the sync path checks it between reads); an answer past the size, or a status 200 whose
body is not JSON (a proxy's error page), is an outage like a 502. A JSON answer that is
not an embeddings response (no `data` list of `index` and `embedding`) fails the batch.

Outages (connection errors, timeouts, 5xx) go through a `CircuitBreaker`, as the judge's
do: retried without counting against `max_retries`, five in a row open the breaker, which
holds every call and probes the server until it answers; a call fails only after
`max_wait_s` (`max_embedder_wait`). Both paths run the one call loop of
`processors.openai_endpoint.client.Endpoint`, the judge's too. Server messages in errors
and logs are scrubbed of secret shapes and cut short (`core.redaction.scrub`).

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
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import openai

from spanscore.core.durations import format_duration
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import Redaction, safe_url, scrub
from spanscore.processors.embedders.base import Embedder, l2_normalize
from spanscore.processors.openai_endpoint.breaker import DEFAULT_MAX_WAIT_S, Unreachable
from spanscore.processors.openai_endpoint.client import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_S,
    Endpoint,
    Exchange,
    Failure,
    UnusableAnswer,
    read_json_answer,
    read_json_answer_sync,
)
from spanscore.processors.openai_endpoint.retry import (
    GiveUp,
    RetryPolicy,
    is_retryable,
    outage_reason,
    retry_after_s,
)

DEFAULT_MODEL = "text-embedding-3-small"
DEFAULT_BATCH_SIZE = 128
DEFAULT_MAX_CONCURRENCY = 4
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_BACKOFF_S = 8.0  # embeddings sit on the scoring path: give up sooner than the judge
DEFAULT_RETRY = RetryPolicy(max_retries=DEFAULT_MAX_RETRIES, max_backoff_s=DEFAULT_MAX_BACKOFF_S)
PROBE_TEXT = "dimension probe"
# 8,192 dimensions as JSON floats take about 200 kB; base64 takes a sixth of that.
MAX_ANSWER_BYTES_PER_TEXT = 256 << 10

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


def _status(error: BaseException | None) -> int | None:
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
        self.endpoint = Endpoint(
            f"embedder {model!r} at {self._where}",
            base_url=base_url,
            api_key=api_key,
            retry=self.retry,
            log=_log,
            what="embeddings request",
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
            max_wait_s=max_wait_s,
            seed=seed,
        )
        self.breaker = self.endpoint.breaker
        self._width: int | None = dimensions
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def requests_made(self) -> int:
        """Every HTTP attempt, retries included."""
        return self.endpoint.stats().requests

    async def close(self) -> None:
        await self.endpoint.close()

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
        return positions, [wanted[i : i + self.batch_size] for i in range(0, len(wanted), self.batch_size)]

    def _assemble(self, n: int, positions: list[int], results: list[np.ndarray]) -> np.ndarray:
        out = np.zeros((n, self._width or 0), dtype=np.float32)
        if results:
            out[positions] = l2_normalize(np.concatenate(results))
        return out

    async def _request_async(self, batch: list[str]) -> np.ndarray:
        return await self.endpoint.call(_Batch(self, batch))

    def _request_sync(self, batch: list[str]) -> np.ndarray:
        return self.endpoint.call_sync(_Batch(self, batch))

    def _params(self, batch: list[str]) -> dict[str, Any]:
        # base64 is a quarter of the JSON float text; servers that ignore it send floats.
        params: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "base64"}
        if self.dimensions is not None:
            params["dimensions"] = self.dimensions
        return params

    def _vectors(self, answer: Any, expected: int) -> np.ndarray:
        items = _items(answer)
        indexes = [index for index, _ in items]
        if sorted(indexes) != list(range(expected)):
            raise EmbeddingRequestError(
                f"the embeddings response for {expected} texts had indexes {excerpt(str(indexes), 200)}", attempts=1
            )
        rows = [_decode(embedding) for _, embedding in sorted(items, key=lambda item: item[0])]
        widths = {row.size for row in rows}
        if len(widths) != 1 or 0 in widths:
            raise EmbeddingRequestError(f"the embeddings response had vectors of widths {sorted(widths)}", attempts=1)
        width = widths.pop()
        with self._lock:
            if self._width is None:
                self._width = width
        if width != self._width:
            raise EmbeddingRequestError(
                f"{self.model!r} returned {width}-dimensional vectors after {self._width}-dimensional ones", attempts=1
            )
        return np.stack(rows)


class _Batch(Exchange[np.ndarray]):
    """One batch's requests."""

    def __init__(self, embedder: OpenAIEmbedder, batch: list[str]):
        self.embedder = embedder
        self.batch = batch

    def send(self, client: openai.OpenAI | openai.AsyncOpenAI) -> Any:
        """The answer as parsed JSON, read within bounds (see the module docstring)."""
        params = self.embedder._params(self.batch)
        max_bytes = MAX_ANSWER_BYTES_PER_TEXT * len(self.batch)
        if isinstance(client, openai.AsyncOpenAI):
            return self._send_async(client, params, max_bytes)
        deadline = time.monotonic() + self.embedder.timeout_s
        with client.embeddings.with_streaming_response.create(**params) as response:
            return read_json_answer_sync(response, max_bytes, deadline)

    async def _send_async(self, client: openai.AsyncOpenAI, params: dict[str, Any], max_bytes: int) -> Any:
        async with client.embeddings.with_streaming_response.create(**params) as response:
            return await read_json_answer(response, max_bytes)

    def classify(self, error: openai.OpenAIError) -> Failure:
        if isinstance(error, UnusableAnswer):
            return Failure(error.message, True, outage=error.outage, cause=error)
        return Failure(
            _describe(error),
            is_retryable(error),
            retry_after_s(error),
            outage_reason(error, self.embedder.timeout_s),
            error,
        )

    def read(self, response: Any) -> np.ndarray:
        return self.embedder._vectors(response, len(self.batch))

    def gave_up(self, failure: Failure, why: GiveUp) -> EmbeddingRequestError:
        attempts, size = self.requests, len(self.batch)
        if why is GiveUp.NOT_RETRYABLE:
            reason = "not retryable"
        elif why is GiveUp.RETRIES_SPENT:
            reason = f"gave up after {attempts} attempt{'s' if attempts > 1 else ''}"
        else:
            reason = f"Retry-After exceeds max_retry_after_s={self.embedder.retry.max_retry_after_s:g}"
        return EmbeddingRequestError(
            f"embedding {size} text{'s' if size > 1 else ''} with {self.embedder.model!r} at "
            f"{self.embedder._where} failed ({reason}): {failure.message}",
            attempts=attempts,
            status=_status(failure.cause),
        )

    def unreachable(self, outage: Unreachable) -> EmbeddingRequestError:
        size = len(self.batch)
        return EmbeddingRequestError(
            f"embedding {size} text{'s' if size > 1 else ''}: {self.embedder.breaker.name} unreachable for "
            f"{format_duration(outage.waited_s)} (max_embedder_wait): {outage.reason}",
            attempts=self.requests,
        )


def _items(answer: Any) -> list[tuple[int, Any]]:
    """(index, embedding) of each vector of an embeddings response (parsed JSON)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or not all(
        isinstance(item, dict) and type(item.get("index")) is int and "embedding" in item for item in data
    ):
        raise EmbeddingRequestError(
            "the answer is not an embeddings response (a `data` list of objects with `index` and `embedding`)",
            attempts=1,
        )
    return [(item["index"], item["embedding"]) for item in data]


def _decode(embedding: Any) -> np.ndarray:
    """A vector as sent: base64 of little-endian float32, or a list of numbers."""
    try:
        if isinstance(embedding, str):
            return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").astype(np.float32)
        if isinstance(embedding, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in embedding
        ):
            return np.asarray(embedding, dtype=np.float32)
    except ValueError:  # binascii.Error, or a byte count that is not a whole number of floats
        pass
    raise EmbeddingRequestError(
        "the embeddings response held a vector that is neither base64 float32 nor a list of numbers", attempts=1
    )


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
