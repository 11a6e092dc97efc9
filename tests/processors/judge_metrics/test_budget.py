"""The judge's hourly budget: the sliding window by hand, then a real loopback server."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time

import pytest
from pydantic import ValidationError

from spanscore.processors.judge_metrics.budget import BudgetExhausted, BudgetWindow, JudgeBudget
from spanscore.processors.judge_metrics.cache import JudgeCache
from spanscore.processors.judge_metrics.client import OpenAIJudge
from spanscore.processors.judge_metrics.config import JudgeConfig, build_judge
from tests.support.judge_request import FAST_RETRY, MESSAGES, SCHEMA, answer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_requests_slide_out_of_the_window_an_hour_after_they_were_sent():
    clock = Clock()
    budget = JudgeBudget(requests_per_hour=3, clock=clock)
    for clock.now in (0.0, 10.0, 20.5):
        budget.reserve()
    assert budget.remaining_requests() == 0 and budget.remaining_tokens() is None
    clock.now = 30.0
    with pytest.raises(
        BudgetExhausted,
        match=r"^judge budget exhausted: 3 requests in the last hour "
        r"\(requests_per_hour: 3\)$",
    ) as caught:
        budget.reserve(calls=2)
    assert caught.value.error_type == "budget_exhausted" and caught.value.calls == 2 and budget.refused == 1
    # Sent during second 0, the first request leaves at second 3601: never 4 in 3,600 s.
    clock.now = 3600.9
    with pytest.raises(BudgetExhausted):
        budget.reserve()
    clock.now = 3601.0
    assert budget.remaining_requests() == 1
    budget.reserve()
    clock.now = 3620.5  # the one sent at 10.0 left at 3611, the one at 20.5 leaves at 3621
    assert budget.remaining_requests() == 1
    clock.now = 3621.0
    assert budget.remaining_requests() == 2


def test_tokens_count_what_replies_reported_and_stop_the_next_request():
    clock = Clock()
    budget = JudgeBudget(tokens_per_hour=300, clock=clock)
    budget.reserve()
    budget.spend(150)
    budget.reserve()
    budget.spend(149)
    assert budget.remaining_tokens() == 1 and budget.remaining_requests() is None
    budget.reserve()  # 299 < 300: it may go, and may take the spend past the cap
    budget.spend(150)
    with pytest.raises(BudgetExhausted, match=r"449 tokens in the last hour \(tokens_per_hour: 300\)"):
        budget.reserve()
    assert budget.remaining_tokens() == 0


async def test_the_fourth_call_of_three_per_hour_sends_nothing_and_cached_answers_stay_free(openai_server):
    openai_server.handler = lambda request: answer(0.5, prompt_tokens=120, completion_tokens=30)
    judge = OpenAIJudge(
        model="judge-test",
        base_url=openai_server.base_url,
        api_key="test-key",
        retry=FAST_RETRY,
        cache=JudgeCache(max_entries=10),
        budget=JudgeBudget(requests_per_hour=3),
    )
    for name in ("g1", "g2", "g3"):
        assert (await judge.complete(MESSAGES, SCHEMA, name)).calls == 1
    with pytest.raises(BudgetExhausted, match="3 requests in the last hour"):
        await judge.complete(MESSAGES, SCHEMA, "g4")
    assert (await judge.complete(MESSAGES, SCHEMA, "g1")).cached  # answered before: no request needed
    assert len(openai_server.requests_to("/chat/completions")) == 3
    stats = judge.stats()
    assert (stats.requests, stats.failures, stats.cache_hits) == (3, 0, 1)
    assert (stats.input_tokens, stats.output_tokens) == (360, 90)
    assert judge.budget.refused == 1 and judge.budget.remaining_requests() == 0


def test_budget_and_max_judge_wait_are_judge_settings():
    config = JudgeConfig.model_validate(
        {"model": "m", "max_judge_wait": "5s", "budget": {"requests_per_hour": 3, "tokens_per_hour": 1000}}
    )
    judge = build_judge(config)
    assert judge.breaker.max_wait_s == 5.0
    assert (judge.budget.requests_per_hour, judge.budget.tokens_per_hour) == (3, 1000)
    defaults = build_judge({"model": "m"})
    assert defaults.breaker.max_wait_s == 600.0 and defaults.budget is None
    for bad in ({"requests_per_hour": 0}, {"tokens": 5}):
        with pytest.raises(ValidationError):
            JudgeConfig.model_validate({"model": "m", "budget": bad})
    with pytest.raises(ValidationError):
        JudgeConfig.model_validate({"model": "m", "max_judge_wait": "0s"})


def test_spend_an_hour_apart_lands_in_the_same_second_of_the_ring_and_both_count():
    clock = Clock()
    budget = JudgeBudget(requests_per_hour=10, clock=clock)
    clock.now = 10.0
    budget.reserve()
    clock.now = 3610.0  # the spend at 10 is still in the window
    budget.reserve()
    assert budget.remaining_requests() == 8
    clock.now = 3611.0
    assert budget.remaining_requests() == 9
    clock.now = 7211.0
    assert budget.remaining_requests() == 10


def test_the_window_agrees_with_a_list_of_every_spend_over_hours_of_random_traffic():
    rng = random.Random(7)
    clock = Clock()
    budget = JudgeBudget(requests_per_hour=40, tokens_per_hour=5_000, clock=clock)
    spends: list[tuple[int, int, int]] = []  # (second, requests, tokens): the reference
    # Mostly short steps, then about an hour (where spend ends up in the ring slot of spend
    # an hour earlier), and long idle spells (past an hour: the whole ring expires).
    steps = [0.0] * 8 + [0.4, 1.0, 7.0] * 4 + [90.0, 600.0, 3_599.0, 3_600.0, 3_601.0, 4_000.0]

    def in_window() -> tuple[int, int]:
        now = int(clock.now)
        kept = [(r, t) for second, r, t in spends if second >= now - 3600]
        return sum(r for r, _ in kept), sum(t for _, t in kept)

    for _ in range(3_000):
        clock.now += rng.choice(steps)
        requests, tokens = in_window()
        assert (budget.remaining_requests(), budget.remaining_tokens()) == (
            max(0, 40 - requests),
            max(0, 5_000 - tokens),
        )
        if requests < 40 and tokens < 5_000:
            budget.reserve()
            spends.append((int(clock.now), 1, 0))
            spent = rng.randrange(0, 400)
            budget.spend(spent)
            spends.append((int(clock.now), 0, spent))
        else:
            with pytest.raises(BudgetExhausted):
                budget.reserve()
    assert budget.refused > 20 and len(spends) > 1_000  # both branches ran many times


def _hold_until_killed(lock, holding) -> None:  # in a child process
    with lock:
        holding.set()
        time.sleep(60)


def test_a_worker_killed_while_holding_a_shared_budget_does_not_stop_the_others():
    window = BudgetWindow(shared=True)
    context = multiprocessing.get_context("spawn")
    holding = context.Event()
    holder = context.Process(target=_hold_until_killed, args=(window.lock, holding), daemon=True)
    holder.start()
    try:
        assert holding.wait(60), "the child did not take the lock"
    finally:
        holder.kill()
        holder.join(10)
    budget = JudgeBudget(requests_per_hour=2, window=window)
    reserved = threading.Event()
    threading.Thread(target=lambda: (budget.reserve(), reserved.set()), daemon=True).start()
    assert reserved.wait(5), "the lock died with its holder and was never released"
    assert budget.remaining_requests() == 1
