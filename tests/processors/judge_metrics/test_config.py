import pytest
from pydantic import ValidationError

from spanscore.processors.judge_metrics.cache import JudgeCache
from spanscore.processors.judge_metrics.client import DEFAULT_BASE_URL, OpenAIJudge
from spanscore.processors.judge_metrics.config import JudgeConfig, build_judge
from tests.support.judge_request import MESSAGES, SCHEMA, answer


def test_defaults():
    config = JudgeConfig(model="gpt-4o-mini")
    assert (config.timeout, config.max_concurrency, config.max_retries) == (30.0, 16, 4)
    assert (config.initial_backoff, config.max_backoff, config.max_retry_after) == (0.5, 20.0, 60.0)
    assert config.temperature == 0.0 and config.base_url is None
    assert (config.max_tokens, config.max_answer_bytes) == (4096, 1 << 20)  # answers are bounded by default
    assert config.cache.enabled and config.cache.max_entries == 10_000 and config.cache.sqlite_path is None


def test_durations_are_written_the_collector_way():
    config = JudgeConfig.model_validate({"model": "m", "timeout": "1m30s", "initial_backoff": "250ms"})
    assert config.timeout == 90.0 and config.initial_backoff == 0.25


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"model": ""},
        {"model": "m", "tmeout": "1s"},
        {"model": "m", "timeout": "soon"},
        {"model": "m", "temperature": 3},
        {"model": "m", "max_concurrency": 0},
        {"model": "m", "initial_backoff": "30s", "max_backoff": "1s"},
        {"model": "m", "cache": {"sqlite": "x.db"}},
    ],
)
def test_invalid_configs_are_rejected(data):
    with pytest.raises(ValidationError):
        JudgeConfig.model_validate(data)


def test_configs_are_frozen():
    with pytest.raises(ValidationError):
        JudgeConfig(model="m").model = "other"


def test_the_api_key_is_not_shown():
    assert "secret" not in repr(JudgeConfig(model="m", api_key="secret"))


def test_build_judge_passes_every_setting(tmp_path):
    judge = build_judge(
        {
            "model": "m",
            "base_url": "http://localhost:9/v1/",
            "timeout": "2s",
            "max_concurrency": 2,
            "max_retries": 1,
            "initial_backoff": "10ms",
            "max_backoff": "1s",
            "max_retry_after": "5s",
            "temperature": 0.2,
            "max_tokens": 64,
            "cache": {"max_entries": 5, "sqlite_path": str(tmp_path / "c.db")},
        }
    )
    assert isinstance(judge, OpenAIJudge)
    assert (judge.model, judge.base_url, judge.timeout_s, judge.max_concurrency) == (
        "m",
        "http://localhost:9/v1",
        2.0,
        2,
    )
    assert (judge.retry.max_retries, judge.retry.initial_backoff_s, judge.retry.max_retry_after_s) == (1, 0.01, 5.0)
    assert (judge.temperature, judge.max_tokens) == (0.2, 64)
    assert isinstance(judge.cache, JudgeCache) and judge.cache.max_entries == 5


def test_the_cache_can_be_turned_off():
    assert build_judge({"model": "m", "cache": {"enabled": False}}).cache is None
    assert build_judge({"model": "m", "cache": {"max_entries": 0}}).cache is None


def test_base_url_comes_from_the_environment_else_openai(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert build_judge({"model": "m"}).base_url == DEFAULT_BASE_URL
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")
    assert build_judge({"model": "m"}).base_url == "http://127.0.0.1:8080/v1"


async def test_a_local_server_needs_no_api_key(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_server.handler = lambda request: answer(0.5)
    judge = build_judge({"model": "m", "base_url": openai_server.base_url})
    assert (await judge.complete(MESSAGES, SCHEMA, "grade")).data["score"] == 0.5
    assert openai_server.requests[0].headers["Authorization"].startswith("Bearer ")
    await judge.close()


async def test_the_api_key_comes_from_the_environment(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    openai_server.handler = lambda request: answer(0.5)
    await build_judge({"model": "m", "base_url": openai_server.base_url}).complete(MESSAGES, SCHEMA, "grade")
    assert openai_server.requests[0].headers["Authorization"] == "Bearer env-key"
