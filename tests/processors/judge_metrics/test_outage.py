"""Judge outages against a real loopback server that is down (nothing listening), then
loading (503), then back: held calls are answered, or fail saying why once
`max_judge_wait` is up. Timescales are fractions of a second; tests/e2e has the minute."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.client import OpenAIJudge, RetryPolicy
from spanscore.processors.openai_endpoint.breaker import BreakerState
from tests.support.judge_request import MESSAGES, SCHEMA, answer
from tests.support.openai_server import ErrorReply, OpenAIServer, RecordedRequest, Reply
from tests.support.ports import free_port

# max_retries=1: what gets a call through an outage must be the breaker, not retries.
OUTAGE_RETRY = RetryPolicy(max_retries=1, initial_backoff_s=0.05, max_backoff_s=0.2)


class LoadingThenUp:
    """A handler answering 503 "Loading model" until `up()`, noting how many requests it
    was handling at once while loading."""

    def __init__(self, server: OpenAIServer):
        self.server = server
        self.loading = True
        self.loading_requests: list[float] = []
        self.loading_peak_in_flight = 0
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> Reply | ErrorReply:
        if not self.loading:
            return answer()
        with self._lock:
            self.loading_requests.append(time.monotonic())
            self.loading_peak_in_flight = max(self.loading_peak_in_flight, self.server.chat_in_flight)
        return ErrorReply(503, "Loading model")

    def up(self) -> None:
        self.loading = False


def judge_for(server: OpenAIServer, **settings) -> OpenAIJudge:
    settings.setdefault("retry", OUTAGE_RETRY)
    return OpenAIJudge(model="judge-test", base_url=server.base_url, api_key="test-key", seed=5, **settings)


async def test_a_judge_down_then_loading_then_back_answers_every_held_call():
    server = OpenAIServer(port=free_port())  # not started: connections are refused
    handler = server.handler = LoadingThenUp(server)
    judge = judge_for(server, max_wait_s=20.0)
    calls = [asyncio.create_task(judge.complete(MESSAGES, SCHEMA, f"grade_{i}")) for i in range(8)]
    try:
        await asyncio.sleep(1.0)
        # Every call is held (but the probe, when one is out).
        assert judge.breaker.state is not BreakerState.CLOSED and judge.breaker.held >= 7
        await asyncio.to_thread(server.start)
        await asyncio.sleep(1.0)
        assert judge.breaker.state is not BreakerState.CLOSED and handler.loading_requests
        handler.up()
        replies = await asyncio.wait_for(asyncio.gather(*calls), 10)
    finally:
        await asyncio.to_thread(server.stop)
    assert [r.data for r in replies] == [{"score": 0.5, "reason": "fine"}] * 8
    assert judge.breaker.state is BreakerState.CLOSED and judge.breaker.opened == 1 and judge.breaker.held == 0
    # While it was loading, the held calls reached it one probe at a time.
    assert handler.loading_peak_in_flight == 1
    gaps = [b - a for a, b in zip(handler.loading_requests, handler.loading_requests[1:])]
    assert all(gap >= 0.04 for gap in gaps), gaps
    stats = judge.stats()
    assert stats.failures == 0 and stats.completions == 8


async def test_past_max_judge_wait_every_held_call_fails_saying_how_long_and_why():
    server = OpenAIServer(handler=lambda request: ErrorReply(503, "Loading model"))
    with server:
        judge = judge_for(server, max_wait_s=0.5)
        started = time.monotonic()
        outcomes = await asyncio.gather(
            *(judge.complete(MESSAGES, SCHEMA, f"grade_{i}") for i in range(3)), return_exceptions=True
        )
        elapsed = time.monotonic() - started
    assert all(isinstance(o, JudgeError) and o.error_type == "judge_unavailable" for o in outcomes), outcomes
    assert {str(o) for o in outcomes} == {
        f"judge 'judge-test' at {server.base_url} unreachable for 500ms (max_judge_wait): "
        "HTTP 503: Error code: 503 - Loading model"
    }
    assert 0.5 <= elapsed < 2.0


async def test_the_breaker_opens_after_five_failures_then_probes_one_request_at_a_time():
    server = OpenAIServer()
    handler = server.handler = LoadingThenUp(server)
    with server:
        judge = judge_for(
            server,
            retry=RetryPolicy(max_retries=1, initial_backoff_s=0.1, max_backoff_s=0.2),
            max_wait_s=1.0,
            start_concurrency=10,  # the ten at once
        )
        await asyncio.gather(
            *(judge.complete(MESSAGES, SCHEMA, f"grade_{i}") for i in range(10)), return_exceptions=True
        )
    times = handler.loading_requests
    # All ten calls went out together and failed; the fifth failure opened the breaker.
    assert judge.breaker.opened == 1 and times[9] - times[0] < 0.1
    # Then probes alone, at 0.1 s then every 0.2 s (the cap) until the calls' 1 s were up:
    # at about 0.1, 0.3, 0.5, 0.7 and 0.9 s after the first wave.
    probes = [t - times[9] for t in times[10:]]
    assert 4 <= len(probes) <= 5, probes
    assert probes[0] >= 0.1 and all(b - a >= 0.19 for a, b in zip(probes, probes[1:])), probes
    assert judge.stats().failures == 10


@pytest.mark.parametrize("reply", [ErrorReply(400, "bad request"), Reply(content='{"score": "high"}')])
async def test_a_400_or_a_garbage_answer_is_not_an_outage(reply):
    server = OpenAIServer(handler=lambda request: reply)
    with server:
        judge = judge_for(server)
        outcomes = await asyncio.gather(
            *(judge.complete(MESSAGES, SCHEMA, f"grade_{i}") for i in range(6)), return_exceptions=True
        )
    assert {o.error_type for o in outcomes} == {"bad_request" if isinstance(reply, ErrorReply) else "malformed_answer"}
    assert judge.breaker.state is BreakerState.CLOSED and judge.breaker.opened == 0


async def test_a_5xx_for_one_request_while_others_are_answered_fails_after_max_retries():
    def handler(request: RecordedRequest) -> Reply | ErrorReply:
        poisoned = request.body["response_format"]["json_schema"]["name"] == "poisoned"
        return ErrorReply(500, "this prompt crashes the model") if poisoned else answer()

    server = OpenAIServer(handler=handler)
    server.chat_latency_s = 0.02
    stop = asyncio.Event()

    async def others() -> None:
        index = 0
        while not stop.is_set():
            index += 1
            await judge.complete(MESSAGES, SCHEMA, f"ok_{index}")

    with server:
        judge = judge_for(
            server, retry=RetryPolicy(max_retries=2, initial_backoff_s=0.01, max_backoff_s=0.05), max_wait_s=5.0
        )
        traffic = [asyncio.create_task(others()) for _ in range(3)]
        started = time.monotonic()
        with pytest.raises(JudgeError, match=r"failed \(gave up after 3 requests\): HTTP 500") as caught:
            await judge.complete(MESSAGES, SCHEMA, "poisoned")
        elapsed = time.monotonic() - started
        stop.set()
        await asyncio.gather(*traffic)
    assert caught.value.error_type == "server_error" and elapsed < 1.0
    assert judge.breaker.opened == 0
