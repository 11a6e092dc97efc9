"""Judge settings, in the Collector's config style, and `build_judge`.

A metric processor that asks an LLM judge holds a `judge:` mapping:

```yaml
judge:
  model: gpt-4o-mini               # required
  base_url: http://localhost:8080/v1   # default: $OPENAI_BASE_URL, else https://api.openai.com/v1
  api_key: sk-...                  # default: $OPENAI_API_KEY; local servers need none
  timeout: 30s                     # per request, its answer read whole included
  max_concurrency: 16              # requests in flight at most: the limit starts at 2 and adapts
  max_retries: 4
  initial_backoff: 500ms
  max_backoff: 20s
  max_retry_after: 60s             # a server asking to wait longer fails the call at once
  max_judge_wait: 10m              # how long an outage may hold a call (circuit breaker)
  budget:                          # a hard cap per sliding hour; past it metrics are skipped
    requests_per_hour: 1000
    tokens_per_hour: 2000000
  temperature: 0.0
  max_tokens: 4096                 # the answer's tokens, at most (sent as max_tokens or max_completion_tokens)
  max_answer_bytes: 1048576        # a larger answer is refused, as a malformed one
  cache:
    enabled: true
    max_entries: 10000             # answers kept in memory
    sqlite_path: ./judge-cache.sqlite   # default: none; answers kept across runs
```
"""

from __future__ import annotations

from typing import Annotated, Any, TypeGuard

from pydantic import AfterValidator, BeforeValidator, Field

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration
from spanscore.processors.judge_metrics import client
from spanscore.processors.judge_metrics.base import Judge
from spanscore.processors.judge_metrics.budget import JudgeBudget
from spanscore.processors.judge_metrics.cache import DEFAULT_MAX_ENTRIES, JudgeCache
from spanscore.processors.openai_endpoint.breaker import DEFAULT_MAX_WAIT_S
from spanscore.processors.openai_endpoint.client import EndpointSettings


class JudgeCacheConfig(ComponentConfig):
    enabled: bool = True
    max_entries: int = Field(default=DEFAULT_MAX_ENTRIES, ge=0)  # 0: no memory layer
    sqlite_path: str | None = Field(default=None, min_length=1)


class JudgeBudgetConfig(ComponentConfig):
    requests_per_hour: int | None = Field(default=None, ge=1)  # None: no cap
    tokens_per_hour: int | None = Field(default=None, ge=1)


class JudgeConfig(EndpointSettings):
    """`base_url`, `api_key` (None: $OPENAI_API_KEY, else a placeholder), `timeout`,
    `max_concurrency` and the retry keys are `EndpointSettings`'."""

    model: str = Field(min_length=1)
    temperature: float = Field(client.DEFAULT_TEMPERATURE, ge=0.0, le=2.0)
    max_tokens: int = Field(client.DEFAULT_MAX_TOKENS, ge=1)
    max_answer_bytes: int = Field(client.DEFAULT_MAX_ANSWER_BYTES, ge=1024)
    cache: JudgeCacheConfig = JudgeCacheConfig()
    max_judge_wait: Duration = Field(DEFAULT_MAX_WAIT_S, gt=0)
    budget: JudgeBudgetConfig = JudgeBudgetConfig()


def _odd(value: int) -> int:
    if value % 2 == 0:
        raise ValueError("trials must be odd, so yes/no verdicts have a majority")
    return value


# How many times each verdict is asked, for a majority vote: the same rule wherever a judge votes.
JudgeTrials = Annotated[int, Field(ge=1, le=15), AfterValidator(_odd)]


def unset_empty_strings(value: Any) -> Any:
    """A judge section's settings without the ones that are "": `${env:OPENAI_API_KEY:-}`
    expands to "" when the variable is unset, which means "not given"."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v != ""}
    return value


# A processor's `judge:` section: absent is None, and "" settings count as not given.
JudgeSection = Annotated[JudgeConfig | None, BeforeValidator(unset_empty_strings)]


def judge_configured(judge: JudgeConfig | None) -> TypeGuard[JudgeConfig]:
    """A judge to call: a section with an api_key or a base_url."""
    return judge is not None and bool(judge.api_key or judge.base_url)


def build_cache(config: JudgeCacheConfig) -> JudgeCache | None:
    """The cache a `cache:` section describes, or None when it keeps nothing."""
    if not config.enabled or (config.max_entries == 0 and config.sqlite_path is None):
        return None
    return JudgeCache(max_entries=config.max_entries, sqlite_path=config.sqlite_path)


def build_budget(config: JudgeBudgetConfig) -> JudgeBudget | None:
    """The budget a `budget:` section describes, or None when it caps nothing."""
    if config.requests_per_hour is None and config.tokens_per_hour is None:
        return None
    return JudgeBudget(requests_per_hour=config.requests_per_hour, tokens_per_hour=config.tokens_per_hour)


def build_judge(config: JudgeConfig | dict[str, Any]) -> Judge:
    """The judge a config (a `JudgeConfig` or the `judge:` mapping) describes."""
    if not isinstance(config, JudgeConfig):
        config = JudgeConfig.model_validate(config)
    return client.OpenAIJudge(
        model=config.model,
        **config.client_args(),
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        max_answer_bytes=config.max_answer_bytes,
        cache=build_cache(config.cache),
        max_wait_s=config.max_judge_wait,
        budget=build_budget(config.budget),
    )


__all__ = ["JudgeBudgetConfig", "JudgeCacheConfig", "JudgeConfig", "build_budget", "build_cache", "build_judge"]
