import sqlite3

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.cache import JudgeCache, cache_key
from spanscore.processors.judge_metrics.client import OpenAIJudge, RetryPolicy
from tests.support.judge_request import MESSAGES, SCHEMA, answer, chat_requests


def make(server, cache, **kwargs) -> OpenAIJudge:
    return OpenAIJudge(
        model="judge-test",
        base_url=server.base_url,
        api_key="k",
        cache=cache,
        retry=RetryPolicy(max_retries=1, initial_backoff_s=0.01),
        **kwargs,
    )


def test_the_key_covers_everything_that_shapes_the_answer():
    base = cache_key("m", MESSAGES, SCHEMA, "grade", 0.0)
    assert base == cache_key("m", [dict(m) for m in MESSAGES], dict(reversed(SCHEMA.items())), "grade", 0.0)
    assert (
        len(
            {
                base,
                cache_key("other", MESSAGES, SCHEMA, "grade", 0.0),
                cache_key("m", MESSAGES[:1], SCHEMA, "grade", 0.0),
                cache_key("m", MESSAGES, {**SCHEMA, "required": ["score"]}, "grade", 0.0),
                cache_key("m", MESSAGES, SCHEMA, "grade2", 0.0),
                cache_key("m", MESSAGES, SCHEMA, "grade", 0.7),
            }
        )
        == 6
    )


async def test_a_repeated_request_is_answered_from_memory(openai_server):
    openai_server.handler = lambda request: answer(0.7, prompt_tokens=50, completion_tokens=5)
    judge = make(openai_server, JudgeCache())
    first = await judge.complete(MESSAGES, SCHEMA, "grade")
    second = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert not first.cached and first.calls == 1 and first.input_tokens == 50
    assert second.data == first.data
    assert (second.cached, second.calls, second.input_tokens, second.output_tokens) == (True, 0, 0, 0)
    assert len(chat_requests(openai_server)) == 1
    assert judge.stats().cache_hits == 1 and judge.cache.stats().hits == 1


async def test_a_caller_mutating_its_answer_does_not_change_the_cache(openai_server):
    openai_server.handler = lambda request: answer(0.7)
    judge = make(openai_server, JudgeCache())
    (await judge.complete(MESSAGES, SCHEMA, "grade")).data["score"] = 0.0
    assert (await judge.complete(MESSAGES, SCHEMA, "grade")).data["score"] == 0.7


async def test_failed_answers_are_not_cached(openai_server):
    openai_server.enqueue(answer(7.5), answer(7.5))
    judge = make(openai_server, JudgeCache())
    with pytest.raises(JudgeError):
        await judge.complete(MESSAGES, SCHEMA, "grade")
    openai_server.handler = lambda request: answer(0.3)
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert not reply.cached and reply.data["score"] == 0.3


async def test_the_lru_evicts_the_least_recently_used(openai_server):
    openai_server.handler = lambda request: answer(0.5)
    judge = make(openai_server, JudgeCache(max_entries=2))
    for name in ("a", "b", "a", "c", "a", "b"):
        await judge.complete(MESSAGES, SCHEMA, name)
    # a, b: misses; a: hit; c evicts b; a: hit; b: miss again
    assert len(chat_requests(openai_server)) == 4
    assert judge.cache.stats().entries == 2


async def test_the_sqlite_cache_survives_a_new_judge(openai_server, tmp_path):
    path = tmp_path / "cache" / "judge.sqlite"
    openai_server.handler = lambda request: answer(0.6)
    first = make(openai_server, JudgeCache(sqlite_path=path))
    await first.complete(MESSAGES, SCHEMA, "grade")
    await first.close()

    second = make(openai_server, JudgeCache(max_entries=0, sqlite_path=path))
    reply = await second.complete(MESSAGES, SCHEMA, "grade")
    assert reply.cached and reply.calls == 0 and reply.data == {"score": 0.6, "reason": "fine"}
    assert len(chat_requests(openai_server)) == 1
    assert second.cache.stats().disk_hits == 1
    await second.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT model FROM judge_answers").fetchall() == [("judge-test",)]


async def test_an_unreadable_sqlite_file_costs_a_request_not_a_score(openai_server, tmp_path):
    path = tmp_path / "judge.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    openai_server.handler = lambda request: answer(0.4)
    judge = make(openai_server, JudgeCache(sqlite_path=path))
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.data["score"] == 0.4 and not reply.cached
    assert (await judge.complete(MESSAGES, SCHEMA, "grade")).cached  # memory still works
