"""A loopback HTTP server speaking enough of the OpenAI REST protocol for real clients.

Tests point the official `openai` client (or the OpenAI Agents SDK, or any
OpenAI-compatible consumer) at `server.base_url` instead of mocking the client, so the
wire format, streaming and retries are exercised for real.

Routes: `POST /v1/chat/completions` (plain and SSE streaming, tool calls, usage),
`POST /v1/responses` (plain and SSE streaming) and `POST /v1/embeddings`.

What the server answers is scripted: replies queued with `enqueue()` are served first,
in order, one per chat/responses request; when the queue is empty the `handler` callable
decides (the default is `weather_agent`). Every request is recorded in `requests`, so a
test can check the prompts a component sent.

Embeddings have their own script, so queued chat replies are never consumed by them:
`enqueue_embeddings()` takes `ErrorReply`s and `Delay`s, served one per request in
order; `embeddings_latency_s` delays every embeddings response; `embeddings_reversed`
lists the vectors last index first (clients must order them by `index`); and
`embeddings_peak_in_flight` is the most embeddings requests the server was handling at
once, for concurrency-cap tests.

Chat completions have the same knobs: a queued `Delay` holds one response (then answers
with its own `reply`, or the handler's, never the next queued one, so a client that gave
up and retried gets the queue in order), `chat_latency_s` delays every response, and
`chat_peak_in_flight` counts concurrency. `chat_slots` makes the server a one-model
server that answers that many requests at a time, as llama.cpp's server with its slots:
the others wait their turn, connection open, each served `chat_latency_s` once it has
a slot, unless their client has gone by then (llama.cpp's Python server checks that
before it runs the model); with `chat_busy_status` set they are answered that status
at once instead (a 503 "server busy"). `rejected_response_formats` names the
`response_format` types the server refuses, the way llama.cpp's server answers HTTP 500
to `json_schema` while it accepts `{"type": "json_object", "schema": ...}`; a refused
request consumes no scripted reply. A `Reply` may set its own token counts, or none.

Outages: `OpenAIServer(port=free_port())` knows its address before it starts (clients
get "connection refused" until then), and `stop()` then `start()` again serves on the
same port, keeping the recorded requests.

Threading: the server runs its own asyncio loop in a daemon thread, so it serves both
synchronous clients and async clients running on another loop. `requests`, `enqueue`
and `handler` may be used from any thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DEFAULT_MODEL = "gpt-test"
DEFAULT_EMBEDDING_DIMENSIONS = 8
WEATHER_REPORT = "Sunny, 22 C"
# What llama.cpp's server says (HTTP 500) to a response_format type it does not know.
LLAMA_CPP_FORMAT_REJECTION = 'response_format type must be one of "text" or "json_object", but got: {type}'


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as the protocol carries it
    id: str = ""


@dataclass(frozen=True)
class Reply:
    """One assistant turn: text, tool calls, or both."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None  # sent as `reasoning_content`, the way vLLM/DeepSeek do
    finish_reason: str | None = None  # derived from tool_calls when None
    prompt_tokens: int | None = None  # usage to report; None: estimated from the request
    completion_tokens: int | None = None
    include_usage: bool = True  # False: no `usage` in the response, as some servers do


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error, e.g. 429 with `Retry-After` for retry tests."""

    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str = "server_error"


@dataclass(frozen=True)
class Delay:
    """Hold a response for `seconds`, then answer normally (slow-server tests). In the chat
    queue, `reply` is the answer (None: the handler's); embeddings ignore it."""

    seconds: float
    reply: Reply | ErrorReply | None = None


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it was not JSON

    def messages(self) -> list[dict[str, Any]]:
        """The conversation in chat-completions shape, whichever API the request used."""
        if not isinstance(self.body, dict):
            return []
        if isinstance(self.body.get("messages"), list):
            return [m for m in self.body["messages"] if isinstance(m, dict)]
        return _responses_input_as_messages(self.body)

    def tool_names(self) -> list[str]:
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        names = []
        for tool in tools if isinstance(tools, list) else []:
            if not isinstance(tool, dict):
                continue
            # chat completions nest the function; the Responses API flattens it
            function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            if isinstance(function.get("name"), str):
                names.append(function["name"])
        return names


Handler = Callable[[RecordedRequest], "Reply | ErrorReply"]


def _responses_input_as_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return messages + [{"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            messages.append({"role": item.get("role", "user"), "content": content})
        elif kind == "function_call":
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": item.get("call_id"),
                            "type": "function",
                            "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                        }
                    ],
                }
            )
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")})
    return messages


def weather_agent(request: RecordedRequest, plan: str | None = None) -> Reply:
    """A deterministic agent: call `get_weather(city="Paris")`, then report its result.

    `plan` is text sent alongside the tool call, the way models state what they are
    about to do.
    """
    messages = request.messages()
    tool_results = [m for m in messages if m.get("role") == "tool"]
    if tool_results:
        result = tool_results[-1].get("content")
        if isinstance(result, list):
            result = "".join(p.get("text", "") for p in result if isinstance(p, dict))
        return Reply(content=f"The weather in Paris is: {result}")
    if "get_weather" in request.tool_names():
        return Reply(
            content=plan,
            tool_calls=(ToolCall(name="get_weather", arguments=json.dumps({"city": "Paris"})),),
        )
    return Reply(content="Hello! Ask me about the weather.")


def _count_tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, default=str).split()) // 2)


def _embedding(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    raw = [(digest[i % len(digest)] - 127.5) / 127.5 for i in range(dimensions)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


class OpenAIServer:
    """Start with `start()` (returns base_url) or as a context manager; stop with `stop()`.
    `port`: 0 picks a free one at the first start; later starts reuse it."""

    def __init__(self, handler: Handler | None = None, model: str = DEFAULT_MODEL, port: int = 0):
        self.handler: Handler = handler or weather_agent
        self.model = model
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Reply | ErrorReply | Delay] = deque()
        self.chat_latency_s = 0.0
        self.chat_in_flight = 0
        self.chat_peak_in_flight = 0
        self.chat_slots: int | None = None  # None: every request served at once
        self.chat_busy_status: int | None = None  # None: requests wait for a slot
        self._chat_slots_taken = 0
        self._chat_slot_freed: asyncio.Condition | None = None  # made in the server's loop
        self.rejected_response_formats: set[str] = set()
        self.rejection_status = 500
        self.rejection_message = LLAMA_CPP_FORMAT_REJECTION  # formatted with the refused {type}
        self._embeddings_queue: deque[ErrorReply | Delay] = deque()
        self.embeddings_latency_s = 0.0
        self.embeddings_reversed = False  # answer data items last index first, as the API may
        self.embeddings_in_flight = 0
        self.embeddings_peak_in_flight = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = port or None

    # -- lifecycle -----------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # surfaced to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="openai-loopback", daemon=True)
        self._thread.start()
        ready.wait(timeout=10)
        if failure:
            raise failure[0]
        return self.base_url

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._loop = self._thread = None

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/embeddings", self._embeddings)
        # Requests still held when it stops (a latency, a Delay) are cut off after a second.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port or 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # -- scripting -----------------------------------------------------------------
    def enqueue(self, *replies: Reply | ErrorReply | Delay) -> None:
        with self._lock:
            self._queue.extend(replies)

    def enqueue_embeddings(self, *replies: ErrorReply | Delay) -> None:
        with self._lock:
            self._embeddings_queue.extend(replies)

    def requests_to(self, path_suffix: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith(path_suffix)]

    async def _record(self, request: web.Request) -> RecordedRequest:
        text = await request.text()
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        recorded = RecordedRequest(request.method, request.path, dict(request.headers), body)
        with self._lock:
            self.requests.append(recorded)
        return recorded

    def _next_reply(self, recorded: RecordedRequest) -> Reply | ErrorReply | Delay:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.handler(recorded)

    async def _resolve(self, recorded: RecordedRequest, reply: Reply | ErrorReply | Delay) -> Reply | ErrorReply:
        if isinstance(reply, Delay):
            await asyncio.sleep(reply.seconds)
            return reply.reply if reply.reply is not None else self.handler(recorded)
        return reply

    def _format_rejection(self, recorded: RecordedRequest) -> web.Response | None:
        body = recorded.body if isinstance(recorded.body, dict) else {}
        response_format = body.get("response_format")
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind not in self.rejected_response_formats:
            return None
        status = self.rejection_status
        error = {
            "code": status,
            "message": self.rejection_message.format(type=kind),
            "type": "server_error" if status >= 500 else "invalid_request_error",
        }
        return web.json_response({"error": error}, status=status)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    @staticmethod
    def _error(reply: ErrorReply) -> web.Response:
        body = {"error": {"message": reply.message, "type": reply.error_type, "code": None, "param": None}}
        return web.json_response(body, status=reply.status, headers=reply.headers)

    def _tool_calls(self, reply: Reply) -> list[ToolCall]:
        return [ToolCall(c.name, c.arguments, c.id or self._new_id("call")) for c in reply.tool_calls]

    # -- chat completions ----------------------------------------------------------
    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            self.chat_in_flight += 1
            self.chat_peak_in_flight = max(self.chat_peak_in_flight, self.chat_in_flight)
        try:
            recorded = await self._record(request)
            if self.chat_slots is None:
                return await self._chat_served(request, recorded)
            if self._chat_slot_freed is None:
                self._chat_slot_freed = asyncio.Condition()
            async with self._chat_slot_freed:
                if self._chat_slots_taken >= self.chat_slots and self.chat_busy_status is not None:
                    return self._error(ErrorReply(self.chat_busy_status, "server busy: all slots are taken"))
                await self._chat_slot_freed.wait_for(lambda: self._chat_slots_taken < (self.chat_slots or 1))
                if request.transport is None or request.transport.is_closing():
                    self._chat_slot_freed.notify()
                    return web.Response(status=499)  # nobody to answer: the client gave up
                self._chat_slots_taken += 1
            try:
                return await self._chat_served(request, recorded)
            finally:
                async with self._chat_slot_freed:
                    self._chat_slots_taken -= 1
                    self._chat_slot_freed.notify()
        finally:
            with self._lock:
                self.chat_in_flight -= 1

    async def _chat_served(self, request: web.Request, recorded: RecordedRequest) -> web.StreamResponse:
        if self.chat_latency_s > 0:
            await asyncio.sleep(self.chat_latency_s)
        rejection = self._format_rejection(recorded)
        if rejection is not None:
            return rejection
        reply = await self._resolve(recorded, self._next_reply(recorded))
        if isinstance(reply, ErrorReply):
            return self._error(reply)
        return await self._chat_reply(request, recorded, reply)

    async def _chat_reply(self, request: web.Request, recorded: RecordedRequest, reply: Reply) -> web.StreamResponse:
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = body.get("model") or self.model
        calls = self._tool_calls(reply)
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        prompt_tokens = reply.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = _count_tokens(body.get("messages"))
        completion_tokens = reply.completion_tokens
        if completion_tokens is None:
            completion_tokens = _count_tokens([reply.content, [c.arguments for c in calls]])
        usage: dict[str, Any] | None = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if not reply.include_usage:
            usage = None
        completion_id = self._new_id("chatcmpl")
        created = int(time.time())
        wire_calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
            if wire_calls:
                message["tool_calls"] = wire_calls
            if reply.reasoning is not None:
                message["reasoning_content"] = reply.reasoning
            completion = {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "system_fingerprint": None,
            }
            if usage is not None:
                completion["usage"] = usage
            return web.json_response(completion)

        def chunk(delta: dict[str, Any] | None, finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
            choices = (
                []
                if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
            )
            return {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }

        events = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            events.append(chunk({"reasoning_content": reply.reasoning}))
        for piece in _pieces(reply.content or ""):
            events.append(chunk({"content": piece}))
        for index, call in enumerate(wire_calls):
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            for piece in _pieces(call["function"]["arguments"]):
                events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        events.append(chunk({}, finish))
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            events.append(chunk(None, usage=usage))
        return await self._sse(request, ((None, e) for e in events), done=True)

    # -- responses -----------------------------------------------------------------
    async def _responses(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        reply = await self._resolve(recorded, self._next_reply(recorded))
        if isinstance(reply, ErrorReply):
            return self._error(reply)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        output: list[dict[str, Any]] = []
        if reply.reasoning:
            output.append(
                {
                    "type": "reasoning",
                    "id": self._new_id("rs"),
                    "summary": [{"type": "summary_text", "text": reply.reasoning}],
                }
            )
        if reply.content is not None:
            output.append(
                {
                    "type": "message",
                    "id": self._new_id("msg"),
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.content, "annotations": [], "logprobs": []}],
                }
            )
        for call in self._tool_calls(reply):
            output.append(
                {
                    "type": "function_call",
                    "id": self._new_id("fc"),
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
        input_tokens = _count_tokens([body.get("instructions"), body.get("input")])
        output_tokens = _count_tokens(output)
        response = {
            "id": self._new_id("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model") or self.model,
            "output": output,
            "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
            "tool_choice": body.get("tool_choice") or "auto",
            "tools": body.get("tools") or [],
            "instructions": body.get("instructions"),
            "error": None,
            "incomplete_details": None,
            "metadata": {},
            "temperature": body.get("temperature"),
            "top_p": body.get("top_p"),
            "text": {"format": {"type": "text"}},
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        if not body.get("stream"):
            return web.json_response(response)
        in_progress = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": in_progress})]
        for index, item in enumerate(output):
            events.append(("response.output_item.added", {"output_index": index, "item": item}))
            events.append(("response.output_item.done", {"output_index": index, "item": item}))
        events.append(("response.completed", {"response": response}))
        numbered = ((name, {"type": name, "sequence_number": n, **data}) for n, (name, data) in enumerate(events))
        return await self._sse(request, numbered, done=False)

    # -- embeddings ----------------------------------------------------------------
    async def _embeddings(self, request: web.Request) -> web.Response:
        with self._lock:
            self.embeddings_in_flight += 1
            self.embeddings_peak_in_flight = max(self.embeddings_peak_in_flight, self.embeddings_in_flight)
        try:
            recorded = await self._record(request)
            with self._lock:
                scripted = self._embeddings_queue.popleft() if self._embeddings_queue else None
            delay = self.embeddings_latency_s + (scripted.seconds if isinstance(scripted, Delay) else 0.0)
            if delay > 0:
                await asyncio.sleep(delay)
            if isinstance(scripted, ErrorReply):
                return self._error(scripted)
            return self._embeddings_reply(recorded)
        finally:
            with self._lock:
                self.embeddings_in_flight -= 1

    def _embeddings_reply(self, recorded: RecordedRequest) -> web.Response:
        body = recorded.body if isinstance(recorded.body, dict) else {}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(x) for x in inputs or []]
        dimensions = int(body.get("dimensions") or DEFAULT_EMBEDDING_DIMENSIONS)
        if body.get("encoding_format") == "base64":
            import base64
            import struct

            def encode(vector: list[float]) -> Any:
                return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        else:

            def encode(vector: list[float]) -> Any:
                return vector

        tokens = sum(_count_tokens(t) for t in texts)
        data = [
            {"object": "embedding", "index": i, "embedding": encode(_embedding(t, dimensions))}
            for i, t in enumerate(texts)
        ]
        return web.json_response(
            {
                "object": "list",
                "model": body.get("model") or self.model,
                "data": data[::-1] if self.embeddings_reversed else data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    @staticmethod
    async def _sse(
        request: web.Request, events: Iterator[tuple[str | None, dict[str, Any]]], done: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for name, data in events:
            prefix = f"event: {name}\n" if name else ""
            await response.write(f"{prefix}data: {json.dumps(data)}\n\n".encode())
        if done:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


try:
    import pytest
except ImportError:  # the server is usable outside pytest too
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def openai_server() -> Iterator[OpenAIServer]:
        """A started loopback server; a conftest makes it available with
        `from tests.support.openai_server import openai_server`."""
        with OpenAIServer() as server:
            yield server
