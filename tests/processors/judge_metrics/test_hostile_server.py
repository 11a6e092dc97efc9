"""The judge against servers that answer badly: a body trickled a byte at a time, a 200
that is an HTML page, an answer of tens of megabytes. Each is a real loopback server."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.client import DEFAULT_MAX_ANSWER_BYTES, OpenAIJudge, RetryPolicy
from tests.support.hostile_http import HostileServer, Request, answer, huge, trickle
from tests.support.judge_request import MESSAGES, SCHEMA

NO_RETRY = RetryPolicy(max_retries=0, initial_backoff_s=0.01, max_backoff_s=0.05)


def completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "judge-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    ).encode()


GOOD = completion(json.dumps({"score": 0.5, "reason": "fine"}))
PROXY_KEY = "sk-proj-" + "Q7w8E9r0" * 4  # a proxy's page may echo the request's headers
HTML = f"<html><head><title>502 Bad Gateway</title></head><body>\x1b[31mkey: {PROXY_KEY}</body></html>".encode()


def judge_at(server: HostileServer, **kwargs) -> OpenAIJudge:
    kwargs.setdefault("retry", NO_RETRY)
    return OpenAIJudge(model="judge-test", base_url=f"{server.url}/v1", api_key="test-key", seed=1, **kwargs)


async def test_a_trickled_answer_times_out_after_timeout_not_after_the_whole_trickle():
    # 200, then a byte every 0.25 s: the answer would take about 40 s to arrive.
    with HostileServer(lambda request: trickle(request, GOOD, every_s=0.25)) as server:
        judge = judge_at(server, timeout_s=1.0, max_wait_s=0.2)
        started = time.monotonic()
        with pytest.raises(JudgeError) as caught:
            await judge.complete(MESSAGES, SCHEMA, "grade")
        elapsed = time.monotonic() - started
        await judge.close()
    # A timeout is an outage, as before: retried, then the call gives up at max_judge_wait.
    assert caught.value.error_type == "judge_unavailable"
    assert "timed out after 1s" in str(caught.value)
    stats = judge.stats()
    assert stats.requests == 2 and stats.request_seconds / stats.requests < 1.4, stats
    assert elapsed < 3.5


async def test_an_html_page_with_status_200_is_retried_and_says_what_came():
    pages = iter([HTML])

    def respond(request: Request) -> None:
        page = next(pages, None)
        if page is None:
            answer(request, 200, GOOD)
        else:
            answer(request, 200, page, content_type="text/html; charset=utf-8")

    with HostileServer(respond) as server:
        judge = judge_at(server, retry=RetryPolicy(max_retries=1, initial_backoff_s=0.01, max_backoff_s=0.05))
        reply = await judge.complete(MESSAGES, SCHEMA, "grade")
        await judge.close()
    assert reply.data == {"score": 0.5, "reason": "fine"} and reply.calls == 2


@pytest.mark.parametrize("content_type", ["text/html", "application/json"])
async def test_a_judge_answering_html_is_an_outage_with_a_bounded_escaped_message(content_type):
    with HostileServer(lambda request: answer(request, 200, HTML * 50, content_type=content_type)) as server:
        judge = judge_at(server, max_wait_s=0.5)
        outcomes = await asyncio.gather(
            *(judge.complete(MESSAGES, SCHEMA, f"grade_{i}") for i in range(6)), return_exceptions=True
        )
        await judge.close()
    assert all(isinstance(o, JudgeError) for o in outcomes), outcomes
    assert {o.error_type for o in outcomes} == {"judge_unavailable"}
    message = str(outcomes[0])
    assert f"answered 200 with {content_type}, not JSON" in message
    assert "<html><head><title>502 Bad Gateway" in message and "\x1b" not in message
    assert PROXY_KEY not in message and "[redacted api key]" in message
    assert len(message) < 400
    # counted by the breaker, as a 502 would be
    assert judge.breaker.opened >= 1


async def test_an_answer_past_the_size_bound_is_refused_without_holding_it():
    # a chat completion whose content is 30 MB of "a"
    head = b'{"id": "x", "object": "chat.completion", '
    head += b'"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
    tail = b'"}, "finish_reason": "stop"}]}'
    with HostileServer(lambda request: huge(request, head, b"a" * 1024, 30 << 20, tail)) as server:
        judge = judge_at(server)
        tracemalloc.start()
        try:
            with pytest.raises(JudgeError) as caught:
                await judge.complete(MESSAGES, SCHEMA, "grade")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await judge.close()
    assert caught.value.error_type == "malformed_answer"
    assert f"answer larger than {DEFAULT_MAX_ANSWER_BYTES:,} bytes" in str(caught.value)
    assert peak < 3 * DEFAULT_MAX_ANSWER_BYTES + (4 << 20), peak
    assert judge.breaker.opened == 0
