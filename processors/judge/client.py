"""`OpenAIJudge`: structured answers from any OpenAI-compatible chat-completions server
(OpenAI, vLLM, Ollama, llama.cpp's server, LiteLLM, ...), through the `openai` package.

Structured output is asked for in the strongest form the server accepts, tried in order:

1. `json_schema`: `response_format={"type": "json_schema", "json_schema": {...}}`;
2. `json_object_schema`: `{"type": "json_object", "schema": ...}`, which llama.cpp turns
   into a grammar while rejecting (1) with HTTP 500;
3. `json_object`: JSON mode without a schema;
4. `text`: no `response_format`; the JSON is parsed out of the reply.

From (2) on the schema is also spelled out in the system prompt. A server refuses a mode
when it answers 400/422/500/501 with an error that names the format (`response_format`,
`json_schema`, `schema`, `structured output`, `guided_json`, `grammar`): the next mode is
tried at once, without backoff, and remembered per (base_url, model) for the life of the
process, so later calls go straight to it. Any other error keeps the mode. Every mode's
reply goes through the same lenient extraction and strict validation (`answers`), so a
server that silently ignores `response_format` still works.

Retries are done here (the client's own are off): connection errors, timeouts, 408, 409,
429, 5xx and malformed answers are retried up to `max_retries` times, waiting what a
`Retry-After`/`retry-after-ms` header asks (plus up to 10% jitter), else exponential
backoff with full jitter (uniform in `[0, min(max_backoff_s, initial_backoff_s * 2**n)]`).
A server asking for more than `max_retry_after_s` fails the call at once rather than park
a scoring task; other 4xx (400, 401, 403, 404, 422, ...) fail at once too.

Outages are not retries: connection errors, timeouts and 5xx go through the judge's
`CircuitBreaker` (`processors/circuit_breaker.py`). They are retried with the same
backoff without counting against `max_retries`; five in a row open the breaker, which
holds every call and probes the server until it answers; a call gives up only after
`max_wait_s` (`max_judge_wait`), with error type `judge_unavailable`. When the server
answers others meanwhile, a call's own 5xx are its own: `max_retries` bounds them again.
A `budget` (`JudgeBudget`) is checked before each request; past it the call raises
`BudgetExhausted` without sending anything.

Log lines and error messages never carry what a server echoed unfiltered: its messages
go through `core.redaction.scrub` (secret shapes hidden, cut to 300 characters), and the
base URL is shown without user info or query.

Threading: `complete` may run concurrently; each event loop gets its own AsyncOpenAI
client and semaphore of `max_concurrency` (asyncio objects cannot cross loops). A
request holds a slot only while in flight, not during a backoff sleep.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

import openai

from spanscore.core.durations import format_duration
from spanscore.core.redaction import safe_url, scrub
from spanscore.processors.circuit_breaker import DEFAULT_MAX_WAIT_S, BreakerState, CircuitBreaker, Hold, Unreachable
from spanscore.processors.judge.answers import MalformedAnswer, parse_answer
from spanscore.processors.judge.base import Judge, JudgeError, JudgeReply
from spanscore.processors.judge.budget import BudgetExhausted, JudgeBudget
from spanscore.processors.judge.cache import JudgeCache, cache_key
from spanscore.processors.openai_retry import RetryPolicy, outage_reason, retry_after_s

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "unused"  # local servers ignore the key, but the client wants one
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_CONCURRENCY = 16
DEFAULT_TEMPERATURE = 0.0

RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx
REJECTION_STATUS = frozenset({400, 422, 500, 501})
_REJECTION_WORDS = re.compile(
    r"response_format|response format|json_schema|json schema|\bschema\b|structured output|guided_json|grammar",
    re.IGNORECASE)
_SCHEMA_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_STATUS_TYPES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 408: "timeout", 409: "conflict", 422: "bad_request", 429: "rate_limited"}
UNAVAILABLE = "judge_unavailable"  # error_type of a call held past max_judge_wait
SCHEMA_INSTRUCTION = ("Answer with a single JSON object and nothing else, matching this JSON schema:\n{schema}")

_log = logging.getLogger(__name__)


class StructuredMode(enum.IntEnum):
    """How structured output is asked for, strongest first."""

    JSON_SCHEMA = 0
    JSON_OBJECT_SCHEMA = 1
    JSON_OBJECT = 2
    TEXT = 3


_modes: dict[tuple[str, str], StructuredMode] = {}
_modes_lock = threading.Lock()


def remembered_mode(base_url: str, model: str) -> StructuredMode:
    with _modes_lock:
        return _modes.get((base_url, model), StructuredMode.JSON_SCHEMA)


def _downgrade(base_url: str, model: str, refused: StructuredMode) -> StructuredMode:
    with _modes_lock:
        # Concurrent calls refused together must not step down twice.
        current = _modes.get((base_url, model), StructuredMode.JSON_SCHEMA)
        chosen = max(current, StructuredMode(refused + 1))
        _modes[(base_url, model)] = chosen
        return chosen


def forget_modes() -> None:
    """Start over from `json_schema` for every server (for tests and reconfiguration)."""
    with _modes_lock:
        _modes.clear()


def is_format_rejection(error: BaseException) -> bool:
    """Whether an HTTP error says the server does not support the response_format sent."""
    if not isinstance(error, openai.APIStatusError) or error.status_code not in REJECTION_STATUS:
        return False
    try:
        body = json.dumps(error.body, default=str)
    except (TypeError, ValueError):
        body = ""
    return bool(_REJECTION_WORDS.search(f"{error.message} {body}"))



@dataclass(frozen=True)
class _Failure:
    error_type: str
    message: str  # scrubbed: it ends up in log lines and span attributes
    retryable: bool
    retry_after_s: float | None = None
    cause: BaseException | None = None
    outage: str | None = None  # why the server looks down, when it does


def _classify(error: BaseException, timeout_s: float) -> _Failure:
    outage = outage_reason(error, timeout_s)
    if isinstance(error, openai.APITimeoutError):
        return _Failure("timeout", "timed out", True, cause=error, outage=outage)
    if isinstance(error, openai.APIConnectionError):
        return _Failure("connection_error", outage or "connection failed", True, cause=error, outage=outage)
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        retryable = status in RETRYABLE_STATUS or status >= 500
        kind = _STATUS_TYPES.get(status, "server_error" if status >= 500 else "bad_request")
        return _Failure(kind, f"HTTP {status}: {scrub(error.message)}", retryable, retry_after_s(error), error,
                        outage)
    if isinstance(error, openai.APIResponseValidationError):
        return _Failure("malformed_answer", f"unreadable response: {scrub(str(error))}", True, cause=error)
    return _Failure("judge_error", scrub(f"{type(error).__name__}: {error}"), False, cause=error)


@dataclass(frozen=True)
class _Answered:
    """A reply from the server: its tokens, and its validated data or why it is unusable."""

    input_tokens: int
    output_tokens: int
    data: dict[str, Any] | None = None
    failure: _Failure | None = None


_DOWNGRADED = object()  # the server refused the response_format: ask again at once in the next mode


@dataclass(frozen=True)
class JudgeStats:
    requests: int  # HTTP requests, retries and format fallbacks included
    completions: int  # calls answered by the server
    cache_hits: int
    failures: int  # calls that raised JudgeError
    retries: int
    input_tokens: int
    output_tokens: int
    request_seconds: float  # time spent in requests, any outcome: over `requests`, the mean latency


class OpenAIJudge(Judge):
    """A `Judge` over an OpenAI-compatible server (see the module docstring)."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        retry: RetryPolicy | None = None,
        temperature: float = DEFAULT_TEMPERATURE,
        max_tokens: int | None = None,
        cache: JudgeCache | None = None,
        seed: int | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        budget: JudgeBudget | None = None,
    ):
        if not model:
            raise ValueError("the judge needs a model")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.model = model
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()  # 4 retries, 0.5 s to 20 s backoff
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.cache = cache
        self.budget = budget
        self.breaker = CircuitBreaker(f"judge {model!r} at {safe_url(self.base_url)}",
                                      probe_delay_s=self.retry.initial_backoff_s,
                                      max_probe_delay_s=self.retry.max_backoff_s, max_wait_s=max_wait_s)
        self._api_key = api_key or os.environ.get(API_KEY_ENV) or PLACEHOLDER_API_KEY
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(JudgeStats.__dataclass_fields__, 0)
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[openai.AsyncOpenAI, asyncio.Semaphore]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r}, base_url={safe_url(self.base_url)!r})"

    @property
    def mode(self) -> StructuredMode:
        """The structured-output mode the next request will use."""
        return remembered_mode(self.base_url, self.model)

    def stats(self) -> JudgeStats:
        with self._lock:
            return JudgeStats(**self._counts)

    def _count(self, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    def _async_state(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        state = self._async.get(loop)
        if state is None:
            client = openai.AsyncOpenAI(api_key=self._api_key, base_url=self.base_url,
                                        timeout=self.timeout_s, max_retries=0)
            state = (client, asyncio.Semaphore(self.max_concurrency))
            self._async[loop] = state
        return state

    async def close(self) -> None:
        state = self._async.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state[0].close()
        if self.cache is not None:
            await self.cache.close()

    # -- completing ------------------------------------------------------------------
    async def complete(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        schema_name: str,
    ) -> JudgeReply:
        if not _SCHEMA_NAME.match(schema_name):
            raise ValueError(f"schema_name must match {_SCHEMA_NAME.pattern}, got {schema_name!r}")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ValueError("the answer schema must be a JSON schema of type object")
        key = None
        if self.cache is not None:
            key = cache_key(self.model, messages, schema, schema_name, self.temperature)
            hit = await self.cache.get(key)
            if hit is not None:
                self._count(cache_hits=1)
                return JudgeReply(data=hit, input_tokens=0, output_tokens=0, calls=0, cached=True)
        try:
            reply = await self._ask(messages, schema, schema_name)
        except BudgetExhausted:
            raise  # not a failure: the call was never made
        except JudgeError:
            self._count(failures=1)
            raise
        if key is not None and self.cache is not None:
            await self.cache.put(key, self.model, reply.data)
        return reply

    async def _ask(self, messages: list[dict[str, str]], schema: dict[str, Any], schema_name: str) -> JudgeReply:
        client, semaphore = self._async_state()
        calls = input_tokens = output_tokens = retry = 0
        hold = Hold()
        while True:
            try:
                probe = await self.breaker.admit(hold)
            except Unreachable as outage:
                raise self._unreachable(outage, calls) from None
            try:
                async with semaphore:
                    if not probe and self.breaker.state is not BreakerState.CLOSED:
                        continue  # it opened while this call waited for a slot: wait for it instead
                    if self.budget is not None:
                        self.budget.reserve(calls)
                    calls += 1
                    outcome = await self._attempt(client, messages, schema, schema_name, probe)
            finally:
                self.breaker.abandon(probe)  # a probe stopped before it reported (cancelled); else a no-op
            if outcome is _DOWNGRADED:
                continue
            if isinstance(outcome, _Answered):
                input_tokens += outcome.input_tokens
                output_tokens += outcome.output_tokens
                if outcome.data is not None:
                    return JudgeReply(data=outcome.data, input_tokens=input_tokens,
                                      output_tokens=output_tokens, calls=calls)
                outcome = outcome.failure
            await self._before_retry(outcome, retry, calls, hold)
            retry += 1
            self._count(retries=1)

    async def _attempt(self, client: openai.AsyncOpenAI, messages: list[dict[str, str]], schema: dict[str, Any],
                       schema_name: str, probe: bool) -> _Answered | _Failure | object:
        """One request, its outcome reported to the breaker."""
        mode = self.mode
        self._count(requests=1)
        started = time.monotonic()
        try:
            response = await client.chat.completions.create(**self._params(messages, schema, schema_name, mode))
        except openai.OpenAIError as error:
            self._count(request_seconds=time.monotonic() - started)
            if isinstance(error, openai.APIStatusError) and mode is not StructuredMode.TEXT \
                    and is_format_rejection(error):
                self.breaker.answered()
                chosen = _downgrade(self.base_url, self.model, mode)
                _log.info("%s refused response_format %s (HTTP %d: %s); using %s", self.breaker.name,
                          mode.name.lower(), error.status_code, scrub(error.message), chosen.name.lower())
                return _DOWNGRADED
            failure = _classify(error, self.timeout_s)
            if failure.outage is None:
                self.breaker.answered()
            else:
                self.breaker.failed(probe, failure.outage, failure.retry_after_s)
            return failure
        self._count(request_seconds=time.monotonic() - started)
        self.breaker.answered()
        used_in, used_out = _usage(response)
        self._count(completions=1, input_tokens=used_in, output_tokens=used_out)
        if self.budget is not None:
            self.budget.spend(used_in + used_out)
        truncated = False
        try:
            text, truncated = _reply_text(response)
            return _Answered(used_in, used_out, data=parse_answer(text, schema))
        except MalformedAnswer as error:
            cut = " (cut off at max_tokens)" if truncated else ""
            return _Answered(used_in, used_out, failure=_Failure(
                "malformed_answer", f"malformed answer{cut}: {scrub(str(error))}", True, cause=error))

    async def _before_retry(self, failure: _Failure, retry: int, attempts: int, hold: Hold) -> None:
        """Wait before the next attempt, or raise JudgeError. An outage holds the call
        (the breaker decides when it goes again) unless the server answered others since
        it began and this call's retries are used up: then the failures are its own."""
        if failure.outage is None or (retry >= self.retry.max_retries and self.breaker.answered_since(hold)):
            await asyncio.sleep(self._delay_s(retry, failure, attempts))
            return
        try:
            left_s = self.breaker.remaining_s(hold)
        except Unreachable as outage:
            raise self._unreachable(outage, attempts) from None
        if self.breaker.state is not BreakerState.CLOSED:
            return  # admit() waits for the probe
        with self._lock:
            delay = min(self.retry.outage_wait_s(retry, failure.retry_after_s, self._rng), left_s)
        _log.warning("judge request failed (%s); retry %d in %.2f s", failure.message, retry + 1, delay)
        await asyncio.sleep(delay)

    def _unreachable(self, outage: Unreachable, attempts: int) -> JudgeError:
        return JudgeError(f"{self.breaker.name} unreachable for {format_duration(outage.waited_s)} "
                          f"(max_judge_wait): {outage.reason}", error_type=UNAVAILABLE, calls=attempts)

    def _params(self, messages: list[dict[str, str]], schema: dict[str, Any], schema_name: str,
                mode: StructuredMode) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "temperature": self.temperature, "timeout": self.timeout_s}
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if mode is StructuredMode.JSON_SCHEMA:
            params["messages"] = messages
            params["response_format"] = {"type": "json_schema", "json_schema": {
                "name": schema_name, "schema": schema, "strict": _strict_compatible(schema)}}
            return params
        params["messages"] = _with_schema_instruction(messages, schema)
        if mode is StructuredMode.JSON_OBJECT_SCHEMA:
            params["response_format"] = {"type": "json_object", "schema": schema}
        elif mode is StructuredMode.JSON_OBJECT:
            params["response_format"] = {"type": "json_object"}
        return params

    def _delay_s(self, retry: int, failure: _Failure, attempts: int) -> float:
        """The wait before the next attempt, or raise JudgeError."""
        why = None
        if not failure.retryable:
            why = "not retryable"
        elif retry >= self.retry.max_retries:
            why = f"gave up after {attempts} request{'s' if attempts > 1 else ''}"
        elif failure.retry_after_s is not None and failure.retry_after_s > self.retry.max_retry_after_s:
            why = (f"the server asked to wait {failure.retry_after_s:g} s, more than "
                   f"max_retry_after={self.retry.max_retry_after_s:g} s")
        if why is not None:
            raise JudgeError(f"{self.breaker.name} failed ({why}): {failure.message}",
                             error_type=failure.error_type, calls=attempts) from failure.cause
        with self._lock:
            delay = self.retry.wait_s(retry, failure.retry_after_s, self._rng)
        _log.warning("judge request failed (%s); retry %d in %.2f s", failure.message, retry + 1, delay)
        return delay


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return 0, 0
    prompt, completion = getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0)
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)


def _reply_text(response: Any) -> tuple[str | None, bool]:
    """The answer's text, and whether `max_tokens` cut it off."""
    choices = getattr(response, "choices", None) or []
    if not choices or getattr(choices[0], "message", None) is None:
        raise MalformedAnswer("the response has no message")
    message = choices[0].message
    if not message.content and getattr(message, "refusal", None):
        raise MalformedAnswer(f"the model refused: {message.refusal}")
    return message.content, choices[0].finish_reason == "length"


def _with_schema_instruction(messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    instruction = SCHEMA_INSTRUCTION.format(schema=json.dumps(schema, separators=(",", ":")))
    # Some chat templates (Gemma's) accept a system message only in first position.
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{instruction}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": instruction}, *messages]


def _strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts the schema: every object closed and every
    property required. A strict flag on any other schema is refused with HTTP 400."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            properties = schema.get("properties") or {}
            if schema.get("additionalProperties") is not False or set(schema.get("required") or ()) != set(properties):
                return False
        return all(_strict_compatible(value) for value in schema.values())
    if isinstance(schema, list):
        return all(_strict_compatible(value) for value in schema)
    return True


__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "JudgeStats",
    "OpenAIJudge",
    "RetryPolicy",
    "StructuredMode",
    "UNAVAILABLE",
    "forget_modes",
    "is_format_rejection",
    "remembered_mode",
]
