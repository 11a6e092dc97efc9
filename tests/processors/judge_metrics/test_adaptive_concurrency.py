"""The judge's concurrency adapts to a server that answers one request at a time, as
llama.cpp's server does with one slot: the loopback server below serves one request per
0.3 s and either queues the others with their connections open (they time out at the
tail of the queue) or answers them 503 at once.

With the fixed 16 requests in flight the judge had before, the same runs failed: queued
requests timed out, five timeouts opened the breaker and 3 of 10 calls ended
`judge_unavailable` (queueing server); 6 of 10 ended `server_error` (503 server)."""

from __future__ import annotations

import asyncio
import time

import pytest

from spanscore.processors.judge_metrics.client import START_CONCURRENCY, OpenAIJudge, RetryPolicy
from tests.support.judge_request import MESSAGES, SCHEMA, answer, chat_requests
from tests.support.openai_server import ErrorReply

SERVICE_S = 0.3  # one answer every 0.3 s
TIMEOUT_S = 1.0  # three answers fit in a timeout: the fourth request queued times out
RETRY = RetryPolicy(max_retries=3, initial_backoff_s=0.05, max_backoff_s=0.2)


@pytest.fixture
def one_slot(openai_server):
    openai_server.handler = lambda request: answer()
    openai_server.chat_slots = 1
    openai_server.chat_latency_s = SERVICE_S
    return openai_server


def make(server, **kwargs) -> OpenAIJudge:
    kwargs.setdefault("retry", RETRY)
    kwargs.setdefault("timeout_s", TIMEOUT_S)
    return OpenAIJudge(model="judge-test", base_url=server.base_url, api_key="k", seed=1, **kwargs)


async def ask_all(judge: OpenAIJudge, calls: int) -> list:
    return await asyncio.gather(
        *(judge.complete(MESSAGES, SCHEMA, f"g{i}") for i in range(calls)), return_exceptions=True
    )


async def test_a_queueing_one_slot_server_answers_every_call_without_a_timeout(one_slot):
    judge = make(one_slot, timeout_s=2.0, max_wait_s=3.0)  # max_concurrency: the default 16, the ceiling
    replies = await ask_all(judge, 12)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    assert len(chat_requests(one_slot)) == judge.stats().requests == 12  # no timeout, no retry
    assert judge.breaker.opened == 0
    # From two in flight it grows while answers come within half the timeout: with four,
    # the last waits 1.2 s, so it grows no further.
    history = list(judge.concurrency.history)
    assert history[:2] == [START_CONCURRENCY, 3] and max(history) <= 4, history
    assert one_slot.chat_peak_in_flight == max(history)
    await judge.close()


async def test_a_one_slot_server_answering_503_when_busy_answers_every_call_the_limit_halving_then_growing(one_slot):
    one_slot.chat_busy_status = 503
    judge = make(one_slot, max_wait_s=3.0)
    replies = await ask_all(judge, 10)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    history = list(judge.concurrency.history)
    assert history[:3] == [2, 1, 2]  # a 503 halves it; four answers grow it again
    assert judge.concurrency.decreases >= 1 and judge.concurrency.increases >= 1
    assert one_slot.chat_peak_in_flight <= 2
    assert judge.stats().concurrency_limit == judge.concurrency.limit
    await judge.close()


async def test_a_limit_started_too_high_comes_down_to_what_the_server_answers_in_time(one_slot):
    judge = make(one_slot, start_concurrency=8, max_concurrency=8, max_wait_s=30.0)
    replies = await ask_all(judge, 12)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    history = list(judge.concurrency.history)
    # Halved once per round: the timeouts of the first burst cut it to 4, not further at once.
    assert history[:2] == [8, 4], history
    assert all(later < earlier for earlier, later in zip(history, history[1:]))  # never grown: no fast answers
    assert judge.concurrency.limit <= 3  # three answers fit in a timeout
    await judge.close()


async def test_timeouts_while_the_judge_answers_others_do_not_open_the_breaker(one_slot):
    one_slot.chat_latency_s = 0.2
    judge = make(one_slot, start_concurrency=8, max_concurrency=8, timeout_s=1.5, max_wait_s=30.0)
    replies = await ask_all(judge, 8)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    # Some answered by 1.4 s, one every 0.2 s (a margin for a slow start of the first
    # requests); the others timed out at 1.5 s, after those answers: busy, not down.
    assert judge.breaker.opened == 0
    assert judge.concurrency.history[1] == 4
    await judge.close()


async def test_time_queued_for_a_slot_does_not_count_toward_the_timeout(one_slot):
    # A timeout of 1 s leaves a 0.3 s answer room on a busy machine (0.5 s did not, once
    # in a few runs: a retry made it 9 requests); the last still waits two timeouts' worth.
    judge = make(one_slot, start_concurrency=1, max_concurrency=1, timeout_s=1.0, max_wait_s=1.0)
    started = time.monotonic()
    replies = await ask_all(judge, 8)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    assert time.monotonic() - started >= 8 * SERVICE_S  # the last waited 2.1 s queued
    assert len(chat_requests(one_slot)) == 8  # each sent once, none timed out
    assert judge.breaker.opened == 0 and judge.stats().failures == 0
    await judge.close()


async def test_time_queued_for_a_slot_is_not_time_held_by_an_outage(one_slot):
    """The first call's 503s start its outage hold (max_judge_wait 1 s); between them it
    waits 1.8 s for the one slot behind six calls the judge answers. That wait is not the
    judge being down: the call is answered on its third request."""
    one_slot.enqueue(ErrorReply(503, "loading model"), *[answer()] * 6, ErrorReply(503, "loading model"))
    judge = make(one_slot, start_concurrency=1, max_concurrency=1, max_wait_s=1.0)
    replies = await ask_all(judge, 7)
    assert [r for r in replies if isinstance(r, BaseException)] == []
    assert replies[0].calls == 3
    assert judge.breaker.opened == 0
    await judge.close()


def test_start_concurrency_must_be_positive(openai_server):
    with pytest.raises(ValueError, match="start_concurrency"):
        make(openai_server, start_concurrency=0)
