"""An OpenAI-compatible server as its clients (the judge, the OpenAI embedder) call it:
its config keys, its SDK clients, and the one loop that runs every call.

`Endpoint.call` sends a call's requests (an `Exchange`) through the endpoint's
`CircuitBreaker` and `RetryPolicy`:

- a failure that is not an outage is retried up to `max_retries` times after the
  policy's wait, unless the policy gives up at once (not retryable, a `Retry-After`
  past `max_retry_after_s`);
- an outage (no connection, a timeout, a 5xx) is retried with the same backoff without
  counting against `max_retries`; enough of them in a row open the breaker, which holds
  every call and probes the server until it answers; a call gives up once held
  `max_wait_s`. When the server answers others meanwhile, a call's own outage failures
  are its own: `max_retries` bounds them again;
- a request holds a slot of the endpoint's `ConcurrencyLimit` only while in flight, not
  while the breaker holds it nor during a backoff sleep; the limit is `max_concurrency`,
  or, given a `start_concurrency`, adapts between one and `max_concurrency` to what the
  server answers (`limiter`). The time a request waits for a slot is not its own: its
  timeout starts when it is sent, and an outage's hold of the call is not counted then;
- a timeout or a 503 of a request while the server answered others is the server being
  busy, not down: it does not count toward opening the breaker (the adaptive limit is
  what answers it);
- in `call`, `timeout` bounds a request whole, its answer's body read to the end
  included (the SDK's own timeout bounds each read only: a server answering a byte every
  few seconds would hold a request for ever); past it the request fails as the SDK's
  timeouts do (`openai.APITimeoutError`), an outage.

An exchange that reads its answer itself (`with_streaming_response`) reads it with
`read_json_answer` (`read_json_answer_sync` in `call_sync`): the body is refused past a
size, and a body that is not JSON (a proxy's HTML page with status 200) is an
`UnusableAnswer` that says what came instead, an outage like a 502, since the server
behind the proxy gave no answer.

The SDK's own retries are off (`max_retries=0`): this policy is the only one, whatever
the version of the `openai` package.

`Endpoint.call_sync` is the same loop for a thread that runs no event loop: driven
without one, each of its waits blocks the thread (`CircuitBreaker.admit_sync`,
`time.sleep`) and its requests go through the sync client. It takes no slot: its callers
bound their threads. A blocking read cannot be cut short from its own thread, so there
`timeout` is the SDK's, per read, and `read_json_answer_sync` stops reading once
`timeout` has passed since the request was sent: a trickling answer holds a request at
most `timeout` and one more read.

Threading: `call` may run concurrently on any event loop; each loop gets its own
AsyncOpenAI client (asyncio objects cannot cross loops), and all share the one limit. `call_sync` may
run concurrently on threads without a running loop, which share one sync client.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import json
import logging
import math
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import openai
from pydantic import Field

from spanscore.core.durations import Duration
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import scrub
from spanscore.processors.openai_endpoint.breaker import (
    DEFAULT_MAX_WAIT_S,
    BreakerState,
    CircuitBreaker,
    Hold,
    Unreachable,
)
from spanscore.processors.openai_endpoint.limiter import ConcurrencyLimit, Outcome, Slot
from spanscore.processors.openai_endpoint.retry import GiveUp, RetryPolicy, RetrySettings, is_overload

API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_CONCURRENCY = 16
SHOWN_BODY_CHARS = 120  # of a body that is not JSON, in an error

T = TypeVar("T")


class _Again(enum.Enum):
    AGAIN = enum.auto()  # the exchange changed its request: send it again at once


_AGAIN: Final = _Again.AGAIN


class EndpointSettings(RetrySettings):
    """The config keys of a client of an OpenAI-compatible server, its retry keys
    included; subclasses may change the defaults."""

    base_url: str | None = Field(None, min_length=1)  # None: $OPENAI_BASE_URL, else the OpenAI API
    api_key: str | None = Field(None, repr=False)  # None: $OPENAI_API_KEY
    timeout: Duration = Field(DEFAULT_TIMEOUT_S, gt=0)  # per request; in `call`, its answer read whole included
    max_concurrency: int = Field(
        DEFAULT_MAX_CONCURRENCY, ge=1
    )  # requests in flight at most (an adaptive limit's ceiling)

    def client_args(self) -> dict[str, Any]:
        """These settings as keyword arguments of the clients (`OpenAIJudge`, `OpenAIEmbedder`)."""
        return {
            "base_url": self.base_url,
            "api_key": self.api_key,
            "timeout_s": self.timeout,
            "max_concurrency": self.max_concurrency,
            "retry": self.retry_policy(),
        }


@dataclass(frozen=True)
class Failure:
    """Why a request got no usable answer."""

    message: str  # scrubbed: it ends up in log lines and errors
    retryable: bool
    retry_after_s: float | None = None  # what the server asked to wait
    outage: str | None = None  # why the server looks down, when it does
    cause: BaseException | None = None
    kind: str = ""  # the client's name for it (the judge's error_type)


class Exchange(abc.ABC, Generic[T]):
    """One call through an `Endpoint`: what its requests send, and what their outcomes
    mean to the client. The endpoint's loop counts the requests sent in `requests`."""

    requests = 0

    def before_request(self) -> None:
        """Called in the request's slot just before it is sent; may raise to end the call
        without sending it (the judge's budget)."""

    @abc.abstractmethod
    def send(self, client: Any) -> Any:
        """One request with the SDK client: `openai.AsyncOpenAI` in `call` (return what
        its method returns, to be awaited), `openai.OpenAI` in `call_sync`."""

    @abc.abstractmethod
    def classify(self, error: openai.OpenAIError) -> Failure | None:
        """What a request's error means; None when the server refused the request's form
        and the exchange changed it: it goes again at once, the server having answered."""

    @abc.abstractmethod
    def read(self, response: Any) -> T | Failure:
        """The call's result from an answer, or why the answer is unusable."""

    @abc.abstractmethod
    def gave_up(self, failure: Failure, why: GiveUp) -> Exception:
        """The error the call raises when `failure` is not tried again."""

    @abc.abstractmethod
    def unreachable(self, outage: Unreachable) -> Exception:
        """The error the call raises once an outage has held it `max_wait_s`."""


class UnusableAnswer(openai.OpenAIError):
    """An answer with a success status whose body cannot be used: past the size an
    exchange reads, or not JSON. `outage`: why the server looks down, when it does (a
    proxy's page instead of the server's answer). The message is bounded and escaped."""

    def __init__(self, message: str, outage: str | None = None):
        super().__init__(message)
        self.message = message
        self.outage = outage


async def read_json_answer(response: Any, max_bytes: int) -> Any:
    """The JSON body of a streamed SDK answer (`with_streaming_response`), read up to
    `max_bytes` (decoded); `UnusableAnswer` past it or when the body is not JSON."""
    body = _Body(max_bytes)
    async for chunk in response.iter_bytes():
        body.take(chunk)
    return body.json(response)


def read_json_answer_sync(response: Any, max_bytes: int, deadline: float) -> Any:
    """`read_json_answer` for the sync client; past `deadline` (`time.monotonic()`) between
    two reads, the request times out as the SDK's own timeouts do."""
    body = _Body(max_bytes)
    for chunk in response.iter_bytes():
        body.take(chunk)
        if time.monotonic() > deadline:
            # The SDK's own error for a timeout, so that every client reads it as one; it has no request to name.
            raise openai.APITimeoutError(request=None)  # pyright: ignore[reportArgumentType]  # openai's stub wants one
    return body.json(response)


class _Body:
    """An answer's bytes as they come, refused past `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.chunks: list[bytes] = []
        self.size = 0

    def take(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise UnusableAnswer(f"answer larger than {self.max_bytes:,} bytes")
        self.chunks.append(chunk)

    def json(self, response: Any) -> Any:
        body = b"".join(self.chunks)
        try:
            return json.loads(body)
        except ValueError:
            content_type = excerpt(response.headers.get("content-type") or "no content type", 60)
            start = " ".join(body[: SHOWN_BODY_CHARS * 4].decode("utf-8", errors="replace").split())
            shown = excerpt(scrub(start, len(start))[:SHOWN_BODY_CHARS])  # the total is said in bytes
            size = f"{self.size:,} bytes"
            reason = f"answered {response.status_code} with {content_type}, not JSON ({size}, starting '{shown}')"
            raise UnusableAnswer(reason, outage=reason) from None


@dataclass(frozen=True)
class EndpointStats:
    requests: int  # requests sent: retries, probes and resent requests included
    retries: int
    request_seconds: float  # time spent in requests, any outcome: over `requests`, the mean latency


class Endpoint:
    """One client's OpenAI-compatible server (see the module docstring). `name` says whose
    server it is in log lines and errors (the breaker's name); the retry log lines go to
    the client's `log`, a request called `what` in them."""

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None,
        api_key: str,
        retry: RetryPolicy,
        log: logging.Logger,
        what: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        seed: int | None = None,
        start_concurrency: int | None = None,
    ):
        self.retry = retry
        self.breaker = CircuitBreaker(
            name, probe_delay_s=retry.initial_backoff_s, max_probe_delay_s=retry.max_backoff_s, max_wait_s=max_wait_s
        )
        self._client_args = {"api_key": api_key, "base_url": base_url, "timeout": timeout_s, "max_retries": 0}
        self._timeout_s = timeout_s
        # An answer past half the timeout means requests already queue at the server: the limit stops growing.
        self.limit = ConcurrencyLimit(max_concurrency, start_concurrency, slow_s=timeout_s / 2)
        self._log = log
        self._what = what
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts: dict[str, float] = dict.fromkeys(EndpointStats.__dataclass_fields__, 0)
        self._sync_client: openai.OpenAI | None = None
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )

    def stats(self) -> EndpointStats:
        with self._lock:
            counts = self._counts  # the counts of requests are whole: only ints are added to them
            return EndpointStats(int(counts["requests"]), int(counts["retries"]), counts["request_seconds"])

    def _count(self, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    # -- clients ---------------------------------------------------------------------
    def _client(self) -> openai.OpenAI:
        with self._lock:
            if self._sync_client is None:
                self._sync_client = openai.OpenAI(**self._client_args)
            return self._sync_client

    def _async_client(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = openai.AsyncOpenAI(**self._client_args)
            self._async[loop] = client
        return client

    async def close(self) -> None:
        """Close the running event loop's client, if it has one, and the sync client."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        async_client = self._async.pop(loop, None) if loop is not None else None
        if async_client is not None:
            await async_client.close()
        with self._lock:
            client, self._sync_client = self._sync_client, None
        if client is not None:
            client.close()

    # -- calling ---------------------------------------------------------------------
    async def call(self, exchange: Exchange[T]) -> T:
        """The exchange's result, or the error it names when the call gives up."""
        return await self._run(exchange, _Awaiting(self.breaker, self._async_client(), self.limit, self._timeout_s))

    def call_sync(self, exchange: Exchange[T]) -> T:
        """`call` for threads: the same loop, blocking the calling thread while it waits."""
        run = self._run(exchange, _Blocking(self.breaker, self._client()))
        try:
            run.send(None)
        except StopIteration as done:
            return done.value
        run.close()
        raise RuntimeError(f"a {self._what} waited on an event loop in call_sync")

    async def _run(self, exchange: Exchange[T], io: _Awaiting | _Blocking) -> T:
        """The call loop: requests through the breaker and the retry policy, until one
        gives the exchange's result or the call gives up."""
        hold = Hold()
        retry = 0
        while True:
            try:
                probe = await io.admit(hold)
            except Unreachable as outage:
                raise exchange.unreachable(outage) from None
            queued = time.monotonic()
            try:
                slot = await io.take_slot()  # a backoff sleep does not hold a slot
            except BaseException:
                self.breaker.abandon(probe)  # a probe cancelled before it had a slot; else a no-op
                raise
            hold.excuse(time.monotonic() - queued)  # waiting for a turn is not waiting out an outage
            load: Outcome | None = None
            try:
                if not probe and self.breaker.state is not BreakerState.CLOSED:
                    continue  # it opened while this call waited for a slot: wait for it instead
                exchange.before_request()
                outcome, load = await self._attempt(exchange, io, probe)
            finally:
                io.give_back(slot, load)
                self.breaker.abandon(probe)  # a probe stopped before it reported (cancelled); else a no-op
            if outcome is _AGAIN:
                continue
            if not isinstance(outcome, Failure):
                return outcome
            delay = self._delay_s(exchange, outcome, retry, hold)
            if delay is not None:
                await io.sleep(delay)
            retry += 1
            self._count(retries=1)

    async def _attempt(
        self, exchange: Exchange[T], io: _Awaiting | _Blocking, probe: bool
    ) -> tuple[T | Failure | Literal[_Again.AGAIN], Outcome]:
        """One request, its outcome reported to the breaker (any answer means the server is
        up) and what it says of the server's load, for the limit."""
        exchange.requests += 1
        self._count(requests=1)
        answers = self.breaker.answers
        started = time.monotonic()
        try:
            response = await io.send(exchange)
        except openai.OpenAIError as error:
            self._count(request_seconds=time.monotonic() - started)
            failure = exchange.classify(error)
            overloaded = is_overload(error)
            if failure is None or failure.outage is None:
                self.breaker.answered()
            elif overloaded and not probe and self.breaker.answers > answers:
                pass  # others were answered while it waited: the server is busy, not down
            else:
                self.breaker.failed(probe, failure.outage, failure.retry_after_s)
            return (_AGAIN if failure is None else failure), Outcome.OVERLOADED if overloaded else Outcome.HOLD
        took_s = time.monotonic() - started
        self._count(request_seconds=took_s)
        self.breaker.answered()
        return exchange.read(response), Outcome.ANSWERED if took_s < self.limit.slow_s else Outcome.HOLD

    def _delay_s(self, exchange: Exchange[Any], failure: Failure, retry: int, hold: Hold) -> float | None:
        """The wait before the next attempt (None: the breaker decides when it goes), or
        raise the exchange's error. An outage holds the call (the breaker bounds how long)
        unless the server answered others since it began and this call's retries are
        spent: then the failures are its own."""
        limit_s = math.inf
        if failure.outage is not None and not (retry >= self.retry.max_retries and self.breaker.answered_since(hold)):
            try:
                limit_s = self.breaker.remaining_s(hold)
            except Unreachable as outage:
                raise exchange.unreachable(outage) from None
            if self.breaker.state is not BreakerState.CLOSED:
                return None  # admit() waits for the probe
        else:
            why = self.retry.give_up(failure.retryable, retry, failure.retry_after_s)
            if why is not None:
                raise exchange.gave_up(failure, why) from failure.cause
        with self._lock:
            delay = min(self.retry.wait_s(retry, failure.retry_after_s, self._rng), limit_s)
        self._log.warning("%s failed (%s); retry %d in %.2f s", self._what, failure.message, retry + 1, delay)
        return delay


class _Awaiting:
    """The loop's waits on the running event loop; a request takes a slot of the limit
    and is cut off `timeout_s` after it was sent, however its answer trickles in."""

    def __init__(self, breaker: CircuitBreaker, client: openai.AsyncOpenAI, limit: ConcurrencyLimit, timeout_s: float):
        self.breaker, self.client, self.limit, self.timeout_s = breaker, client, limit, timeout_s

    async def admit(self, hold: Hold) -> bool:
        return await self.breaker.admit(hold)

    async def take_slot(self) -> Slot:
        return await self.limit.acquire()

    def give_back(self, slot: Slot | None, load: Outcome | None) -> None:
        if slot is not None:
            self.limit.release(slot, load)

    async def send(self, exchange: Exchange[Any]) -> Any:
        try:
            return await asyncio.wait_for(exchange.send(self.client), self.timeout_s)
        except TimeoutError as late:
            # The SDK's own error for a timeout, so that every client reads it as one; it has no request to name.
            raise openai.APITimeoutError(request=None) from late  # pyright: ignore[reportArgumentType]

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Blocking:
    """The loop's waits blocking the calling thread: a coroutine making them never
    suspends, so `call_sync` runs it to its end without an event loop. No slot."""

    def __init__(self, breaker: CircuitBreaker, client: openai.OpenAI):
        self.breaker, self.client = breaker, client

    async def admit(self, hold: Hold) -> bool:
        return self.breaker.admit_sync(hold)

    async def take_slot(self) -> None:
        return None

    def give_back(self, slot: Slot | None, load: Outcome | None) -> None:
        pass

    async def send(self, exchange: Exchange[Any]) -> Any:
        return exchange.send(self.client)

    async def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251  (blocking is the point: no event loop runs this)


__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "Endpoint",
    "EndpointSettings",
    "EndpointStats",
    "Exchange",
    "Failure",
    "UnusableAnswer",
    "read_json_answer",
    "read_json_answer_sync",
]
