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

Answers are bounded. Each request asks for at most `max_tokens` tokens of answer (default
`DEFAULT_MAX_TOKENS`, room for the longest verdict lists the metrics ask for), sent as
`max_tokens`, which every OpenAI-compatible server reads; a server that refuses it and
asks for `max_completion_tokens` instead (OpenAI's reasoning models) gets that, at once,
and remembered like a structured-output mode. The answer's body is read up to
`max_answer_bytes` (default `DEFAULT_MAX_ANSWER_BYTES`): past it the answer is refused,
a malformed answer. `timeout` bounds a request whole, its answer read to the end
included. A 200 whose body is not JSON (a proxy's error page) is an outage, as a 502
would be, said with its content type and first characters.

Outages are not retries: connection errors, timeouts and 5xx go through the judge's
`CircuitBreaker` (`processors/openai_endpoint/breaker.py`). They are retried with the
same backoff without counting against `max_retries`; five in a row open the breaker,
which holds every call and probes the server until it answers; a call gives up only
after `max_wait_s` (`max_judge_wait`), with error type `judge_unavailable`. When the
server answers others meanwhile, a call's own 5xx are its own: `max_retries` bounds them
again. The loop that does all this is the `Endpoint`'s (`processors/openai_endpoint`),
shared with the OpenAI embedder. A `budget` (`JudgeBudget`) is checked before each
request; past it the call raises `BudgetExhausted` without sending anything.

Log lines and error messages never carry what a server echoed unfiltered: its messages
go through `core.redaction.scrub` (secret shapes hidden, cut to 300 characters), and the
base URL is shown without user info or query.

Concurrency adapts to the judge (`processors/openai_endpoint/limiter.py`): a judge
starts with `START_CONCURRENCY` requests in flight, grows by one after each window of
answers in time (as many answers as the limit, none slower than half the timeout) up to
`max_concurrency`, and halves on a timeout, 429 or 503, once per round. A server with
one slot (llama.cpp's, by default) thus gets about as many requests as it answers
within the timeout, instead of a queue whose tail times out. A request's wait for a slot
is spent inside spanscore: its timeout starts when it is sent, and the breaker counts
only requests sent; a timeout or 503 while the judge answered others is the judge
being busy, not down, and does not count toward opening the breaker.

Threading: `complete` may run concurrently; each event loop gets its own AsyncOpenAI
client (asyncio objects cannot cross loops), and all share the judge's one limit. A
request holds a slot only while in flight, not during a backoff sleep.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, TypeGuard

import openai

from spanscore.core.durations import format_duration
from spanscore.core.redaction import safe_url, scrub
from spanscore.processors.judge_metrics.answers import MalformedAnswer, parse_answer
from spanscore.processors.judge_metrics.base import Judge, JudgeError, JudgeReply
from spanscore.processors.judge_metrics.budget import BudgetExhausted, JudgeBudget
from spanscore.processors.judge_metrics.cache import JudgeCache, cache_key
from spanscore.processors.judge_metrics.prompts import schema_instruction
from spanscore.processors.openai_endpoint.breaker import DEFAULT_MAX_WAIT_S, Unreachable
from spanscore.processors.openai_endpoint.client import (
    API_KEY_ENV,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    Endpoint,
    Exchange,
    Failure,
    UnusableAnswer,
    read_json_answer,
)
from spanscore.processors.openai_endpoint.retry import GiveUp, RetryPolicy, is_retryable, outage_reason, retry_after_s

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"
PLACEHOLDER_API_KEY = "unused"  # local servers ignore the key, but the client wants one
DEFAULT_TEMPERATURE = 0.0
DEFAULT_MAX_TOKENS = 4096  # 100 tool-call verdicts with a sentence each fit in about 4,000
DEFAULT_MAX_ANSWER_BYTES = 1 << 20  # 4,096 tokens of JSON-escaped text are a few tens of kB

REJECTION_STATUS = frozenset({400, 422, 500, 501})
_REJECTION_WORDS = re.compile(
    r"response_format|response format|json_schema|json schema|\bschema\b|structured output|guided_json|grammar",
    re.IGNORECASE,
)
_SCHEMA_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_STATUS_TYPES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    408: "timeout",
    409: "conflict",
    422: "bad_request",
    429: "rate_limited",
}
UNAVAILABLE = "judge_unavailable"  # error_type of a call held past max_judge_wait
START_CONCURRENCY = 2  # requests in flight at first: a one-slot server answers both in time

_log = logging.getLogger(__name__)


class StructuredMode(enum.IntEnum):
    """How structured output is asked for, strongest first."""

    JSON_SCHEMA = 0
    JSON_OBJECT_SCHEMA = 1
    JSON_OBJECT = 2
    TEXT = 3


_modes: dict[tuple[str, str], StructuredMode] = {}
_modes_lock = threading.Lock()
# Servers that refused `max_tokens` and asked for `max_completion_tokens`, by (base_url, model).
_completion_tokens: set[tuple[str, str]] = set()
_MAX_TOKENS_REFUSED = re.compile(r"max_completion_tokens", re.IGNORECASE)


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
        _completion_tokens.clear()


def _tokens_parameter(base_url: str, model: str) -> str:
    with _modes_lock:
        return "max_completion_tokens" if (base_url, model) in _completion_tokens else "max_tokens"


def _error_says(error: openai.APIStatusError, words: re.Pattern[str]) -> bool:
    """Whether the error's message or body holds `words`."""
    try:
        body = json.dumps(error.body, default=str)
    except (TypeError, ValueError):
        body = ""
    return bool(words.search(f"{error.message} {body}"))


def _refuses_max_tokens(error: openai.APIStatusError) -> bool:
    """Whether a 400 asks for `max_completion_tokens` instead of `max_tokens`, as OpenAI's
    reasoning models do."""
    return error.status_code == 400 and _error_says(error, _MAX_TOKENS_REFUSED)


def is_format_rejection(error: BaseException) -> bool:
    """Whether an HTTP error says the server does not support the response_format sent."""
    return (
        isinstance(error, openai.APIStatusError)
        and error.status_code in REJECTION_STATUS
        and _error_says(error, _REJECTION_WORDS)
    )


def _classify(error: BaseException, timeout_s: float) -> Failure:
    if isinstance(error, UnusableAnswer):
        return Failure(error.message, True, outage=error.outage, cause=error, kind="malformed_answer")
    outage = outage_reason(error, timeout_s)
    if isinstance(error, openai.APITimeoutError):
        return Failure("timed out", True, cause=error, outage=outage, kind="timeout")
    if isinstance(error, openai.APIConnectionError):
        return Failure(outage or "connection failed", True, cause=error, outage=outage, kind="connection_error")
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        kind = _STATUS_TYPES.get(status, "server_error" if status >= 500 else "bad_request")
        return Failure(
            f"HTTP {status}: {scrub(error.message)}", is_retryable(error), retry_after_s(error), outage, error, kind
        )
    if isinstance(error, openai.APIResponseValidationError):
        return Failure(f"unreadable response: {scrub(str(error))}", True, cause=error, kind="malformed_answer")
    return Failure(scrub(f"{type(error).__name__}: {error}"), False, cause=error, kind="judge_error")


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
    concurrency_limit: int  # requests allowed in flight now


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
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        cache: JudgeCache | None = None,
        seed: int | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        budget: JudgeBudget | None = None,
        start_concurrency: int = START_CONCURRENCY,
    ):
        if not model:
            raise ValueError("the judge needs a model")
        if max_concurrency < 1 or start_concurrency < 1:
            raise ValueError(
                f"max_concurrency and start_concurrency must be at least 1, got {max_concurrency}, {start_concurrency}"
            )
        if max_tokens < 1 or max_answer_bytes < 1:
            raise ValueError(f"max_tokens and max_answer_bytes must be positive, got {max_tokens}, {max_answer_bytes}")
        self.model = model
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()  # 4 retries, 0.5 s to 20 s backoff
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_answer_bytes = max_answer_bytes
        self.cache = cache
        self.budget = budget
        self.endpoint = Endpoint(
            f"judge {model!r} at {safe_url(self.base_url)}",
            base_url=self.base_url,
            api_key=api_key or os.environ.get(API_KEY_ENV) or PLACEHOLDER_API_KEY,
            retry=self.retry,
            log=_log,
            what="judge request",
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
            max_wait_s=max_wait_s,
            seed=seed,
            start_concurrency=start_concurrency,
        )
        self.breaker = self.endpoint.breaker
        self.concurrency = self.endpoint.limit
        self._lock = threading.Lock()
        self._counts: dict[str, int] = dict.fromkeys(
            ("completions", "cache_hits", "failures", "input_tokens", "output_tokens"), 0
        )

    def __repr__(self) -> str:
        return f"OpenAIJudge(model={self.model!r}, base_url={safe_url(self.base_url)!r})"

    @property
    def mode(self) -> StructuredMode:
        """The structured-output mode the next request will use."""
        return remembered_mode(self.base_url, self.model)

    def stats(self) -> JudgeStats:
        sent = self.endpoint.stats()
        with self._lock:
            return JudgeStats(
                requests=sent.requests,
                retries=sent.retries,
                request_seconds=sent.request_seconds,
                concurrency_limit=self.concurrency.limit,
                **self._counts,
            )

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                self._counts[name] += amount

    async def close(self) -> None:
        await self.endpoint.close()
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
            reply = await self.endpoint.call(_Asking(self, messages, schema, schema_name))
        except BudgetExhausted:
            raise  # not a failure: the call was never made
        except JudgeError:
            self._count(failures=1)
            raise
        if key is not None and self.cache is not None:
            await self.cache.put(key, self.model, reply.data)
        return reply

    def _params(
        self, messages: list[dict[str, str]], schema: dict[str, Any], schema_name: str, mode: StructuredMode
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "temperature": self.temperature, "timeout": self.timeout_s}
        params[_tokens_parameter(self.base_url, self.model)] = self.max_tokens
        if mode is StructuredMode.JSON_SCHEMA:
            params["messages"] = messages
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": _strict_compatible(schema)},
            }
            return params
        params["messages"] = _with_schema_instruction(messages, schema)
        if mode is StructuredMode.JSON_OBJECT_SCHEMA:
            params["response_format"] = {"type": "json_object", "schema": schema}
        elif mode is StructuredMode.JSON_OBJECT:
            params["response_format"] = {"type": "json_object"}
        return params


class _Asking(Exchange[JudgeReply]):
    """One `complete` call's requests: each in the mode the server is known to accept, the
    tokens of every answer summed."""

    def __init__(self, judge: OpenAIJudge, messages: list[dict[str, str]], schema: dict[str, Any], schema_name: str):
        self.judge = judge
        self.messages = messages
        self.schema = schema
        self.schema_name = schema_name
        self.mode = judge.mode
        self.input_tokens = self.output_tokens = 0

    def before_request(self) -> None:
        if self.judge.budget is not None:
            self.judge.budget.reserve(self.requests)

    async def send(self, client: openai.AsyncOpenAI) -> Any:
        """The answer as parsed JSON, read up to `max_answer_bytes`."""
        self.mode = self.judge.mode
        params = self.judge._params(self.messages, self.schema, self.schema_name, self.mode)
        async with client.chat.completions.with_streaming_response.create(**params) as response:
            return await read_json_answer(response, self.judge.max_answer_bytes)

    def classify(self, error: openai.OpenAIError) -> Failure | None:
        judge = self.judge
        if (
            isinstance(error, openai.APIStatusError)
            and _tokens_parameter(judge.base_url, judge.model) == "max_tokens"
            and _refuses_max_tokens(error)
        ):
            with _modes_lock:
                _completion_tokens.add((judge.base_url, judge.model))
            _log.info("%s refused max_tokens; using max_completion_tokens", judge.breaker.name)
            return None
        if (
            isinstance(error, openai.APIStatusError)
            and self.mode is not StructuredMode.TEXT
            and is_format_rejection(error)
        ):
            chosen = _downgrade(judge.base_url, judge.model, self.mode)
            _log.info(
                "%s refused response_format %s (HTTP %d: %s); using %s",
                judge.breaker.name,
                self.mode.name.lower(),
                error.status_code,
                scrub(error.message),
                chosen.name.lower(),
            )
            return None
        return _classify(error, judge.timeout_s)

    def read(self, response: Any) -> JudgeReply | Failure:
        judge = self.judge
        used_in, used_out = _usage(response)
        judge._count(completions=1, input_tokens=used_in, output_tokens=used_out)
        if judge.budget is not None:
            judge.budget.spend(used_in + used_out)
        self.input_tokens += used_in
        self.output_tokens += used_out
        truncated = False
        try:
            text, truncated = _reply_text(response)
            data = parse_answer(text, self.schema)
        except MalformedAnswer as error:
            cut = " (cut off at max_tokens)" if truncated else ""
            return Failure(f"malformed answer{cut}: {scrub(str(error))}", True, cause=error, kind="malformed_answer")
        return JudgeReply(
            data=data, input_tokens=self.input_tokens, output_tokens=self.output_tokens, calls=self.requests
        )

    def gave_up(self, failure: Failure, why: GiveUp) -> JudgeError:
        retry = self.judge.retry
        if why is GiveUp.NOT_RETRYABLE:
            reason = "not retryable"
        elif why is GiveUp.RETRIES_SPENT:
            reason = f"gave up after {self.requests} request{'s' if self.requests > 1 else ''}"
        else:
            reason = (
                f"the server asked to wait {failure.retry_after_s:g} s, more than "
                f"max_retry_after={retry.max_retry_after_s:g} s"
            )
        return JudgeError(
            f"{self.judge.breaker.name} failed ({reason}): {failure.message}",
            error_type=failure.kind,
            calls=self.requests,
        )

    def unreachable(self, outage: Unreachable) -> JudgeError:
        return JudgeError(
            f"{self.judge.breaker.name} unreachable for {format_duration(outage.waited_s)} "
            f"(max_judge_wait): {outage.reason}",
            error_type=UNAVAILABLE,
            calls=self.requests,
        )


def _usage(response: Any) -> tuple[int, int]:
    """The tokens a chat completion (parsed JSON) says it used: prompt, answer."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (prompt if _count_of(prompt) else 0), (completion if _count_of(completion) else 0)


def _count_of(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _reply_text(response: Any) -> tuple[str | None, bool]:
    """The answer's text in a chat completion (parsed JSON), and whether `max_tokens` cut
    it off."""
    choices = response.get("choices") if isinstance(response, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        raise MalformedAnswer("the response has no message")
    content, refusal = message.get("content"), message.get("refusal")
    if not content and isinstance(refusal, str) and refusal:
        raise MalformedAnswer(f"the model refused: {refusal}")
    if content is not None and not isinstance(content, str):
        raise MalformedAnswer(f"the message's content is {type(content).__name__}, not text")
    return content, choice.get("finish_reason") == "length"


def _with_schema_instruction(messages: list[dict[str, str]], schema: dict[str, Any]) -> list[dict[str, str]]:
    instruction = schema_instruction(schema)
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
    "DEFAULT_MAX_ANSWER_BYTES",
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_TIMEOUT_S",
    "START_CONCURRENCY",
    "JudgeStats",
    "OpenAIJudge",
    "RetryPolicy",
    "StructuredMode",
    "UNAVAILABLE",
    "forget_modes",
    "is_format_rejection",
    "remembered_mode",
]
