"""Embedder settings, in the Collector's config style, and `build_embedder`.

A processor that embeds takes an `embedder` key:

```yaml
embedder:
  type: openai                 # static | hashing | minilm | openai | auto (the default)
  base_url: http://127.0.0.1:8000/v1
  model: text-embedding-3-small
  timeout: 10s
  cache: {max_entries: 10000}  # 0 turns the cache off
```

`EmbedderConfig` is a union discriminated by `type`. A mapping without `type` means
`auto`: MiniLM when the `spanscore[minilm]` extra is installed, else the static table
distilled from it (semantic, built in); the choice is logged at INFO once per process.
Validation errors carry the key path without the union's branch name
(`embedder.batch_size`, not `embedder.openai.batch_size`), so the Collector config's
messages point at keys the user actually wrote.
"""

from __future__ import annotations

import logging
import threading
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, WrapValidator
from pydantic_core import InitErrorDetails, PydanticCustomError

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration
from spanscore.core.redaction import RedactConfig
from spanscore.processors.embedders import hashing, minilm, openai_embedder, static
from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.cache import DEFAULT_MAX_ENTRIES, CachedEmbedder
from spanscore.processors.embedders.coalescing import CoalescingEmbedder
from spanscore.processors.openai_endpoint.breaker import DEFAULT_MAX_WAIT_S
from spanscore.processors.openai_endpoint.client import EndpointSettings

_log = logging.getLogger(__name__)


class CacheConfig(ComponentConfig):
    max_entries: int = Field(default=DEFAULT_MAX_ENTRIES, ge=0)  # 0: no cache


class StaticEmbedderConfig(ComponentConfig):
    type: Literal["static"] = "static"
    cache: CacheConfig = CacheConfig()


class HashingEmbedderConfig(ComponentConfig):
    type: Literal["hashing"] = "hashing"
    dimension: int = Field(hashing.DEFAULT_DIMENSION, ge=2)
    cache: CacheConfig = CacheConfig()


class MiniLMEmbedderConfig(ComponentConfig):
    type: Literal["minilm"] = "minilm"
    batch_size: int = Field(default=minilm.DEFAULT_BATCH_SIZE, ge=1)
    device: str = minilm.DEFAULT_DEVICE
    cache: CacheConfig = CacheConfig()


class OpenAIEmbedderConfig(EndpointSettings):
    """`base_url`, `api_key`, `timeout`, `max_concurrency` and the retry keys are
    `EndpointSettings`', some with the embedder's defaults."""

    type: Literal["openai"] = "openai"
    model: str = Field(openai_embedder.DEFAULT_MODEL, min_length=1)
    dimensions: int | None = Field(None, ge=1)
    batch_size: int = Field(openai_embedder.DEFAULT_BATCH_SIZE, ge=1, le=2048)
    max_concurrency: int = Field(openai_embedder.DEFAULT_MAX_CONCURRENCY, ge=1)
    max_retries: int = Field(openai_embedder.DEFAULT_MAX_RETRIES, ge=0)
    max_backoff: Duration = Field(openai_embedder.DEFAULT_MAX_BACKOFF_S, gt=0)
    max_embedder_wait: Duration = Field(DEFAULT_MAX_WAIT_S, gt=0)  # how long an outage may hold a call
    # Texts leave for the server redacted, as judge prompts do (false: as recorded).
    redact: RedactConfig = Field(default_factory=RedactConfig)
    cache: CacheConfig = CacheConfig()


class AutoEmbedderConfig(ComponentConfig):
    type: Literal["auto"] = "auto"
    cache: CacheConfig = CacheConfig()


_MODELS: dict[str, type[ComponentConfig]] = {
    "static": StaticEmbedderConfig,
    "hashing": HashingEmbedderConfig,
    "minilm": MiniLMEmbedderConfig,
    "openai": OpenAIEmbedderConfig,
    "auto": AutoEmbedderConfig,
}
_CONFIG_TYPES = tuple(_MODELS.values())


def _by_type(value: Any, handler: Any) -> Any:
    # Dispatch by hand so that error locations skip the union's branch name.
    if isinstance(value, _CONFIG_TYPES) or not isinstance(value, dict):
        return handler(value)
    kind = value.get("type", "auto")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        expected = ", ".join(repr(k) for k in _MODELS)
        raise ValidationError.from_exception_data(
            "EmbedderConfig",
            [
                InitErrorDetails(
                    type=PydanticCustomError(
                        "embedder_type", "unknown embedder type; expected one of {expected}", {"expected": expected}
                    ),
                    loc=("type",),
                    input=kind,
                )
            ],
        )
    return model.model_validate(value)


EmbedderConfig = Annotated[
    StaticEmbedderConfig | HashingEmbedderConfig | MiniLMEmbedderConfig | OpenAIEmbedderConfig | AutoEmbedderConfig,
    Field(discriminator="type"),
    WrapValidator(_by_type),
]
"""Use as a field type: `embedder: EmbedderConfig = AutoEmbedderConfig()`."""


class EmbedderSettings(ComponentConfig):
    """A standalone holder, for parsing an `embedder:` mapping on its own."""

    embedder: EmbedderConfig = AutoEmbedderConfig()


def parse_embedder_config(data: Any) -> Any:
    """An `EmbedderConfig` from a mapping (None means `auto`); ValidationError locations
    start with `embedder`."""
    return EmbedderSettings.model_validate({"embedder": {} if data is None else data}).embedder


_auto_choice: str | None = None
_auto_lock = threading.Lock()


def resolve_auto() -> str:
    """`minilm` when its extra is installed, else `static`; logged at INFO the first time."""
    global _auto_choice
    with _auto_lock:
        if _auto_choice is None:
            missing = minilm.missing_modules()
            _auto_choice = "static" if missing else "minilm"
            if missing:
                _log.info(
                    "embedder auto: using static (MiniLM's distilled token table); for the full model "
                    "install spanscore[minilm] (missing %s)",
                    ", ".join(missing),
                )
            else:
                _log.info("embedder auto: using minilm (%s)", minilm.MODEL_ID)
        return _auto_choice


def build_uncached(config: Any) -> Embedder:
    """The embedder a config describes, without its cache."""
    if isinstance(config, AutoEmbedderConfig):
        kind = resolve_auto()
        config = (MiniLMEmbedderConfig if kind == "minilm" else StaticEmbedderConfig)(cache=config.cache)
    if isinstance(config, StaticEmbedderConfig):
        return static.StaticEmbedder()
    if isinstance(config, HashingEmbedderConfig):
        return hashing.HashingEmbedder(dimension=config.dimension)
    if isinstance(config, MiniLMEmbedderConfig):
        return minilm.MiniLMEmbedder(batch_size=config.batch_size, device=config.device)
    if isinstance(config, OpenAIEmbedderConfig):
        return openai_embedder.OpenAIEmbedder(
            model=config.model,
            **config.client_args(),
            dimensions=config.dimensions,
            batch_size=config.batch_size,
            max_wait_s=config.max_embedder_wait,
            redaction=config.redact.redaction(),
        )
    raise TypeError(f"not an embedder config: {config!r}")


def build_embedder(config: Any = None) -> Embedder:
    """The embedder a config (a model or a mapping; None means `auto`) describes: its
    concurrent calls coalesced into batches, behind its LRU cache unless
    `cache.max_entries` is 0 (so only misses are batched)."""
    if config is None or isinstance(config, dict):
        config = parse_embedder_config(config)
    inner = CoalescingEmbedder(build_uncached(config))
    if config.cache.max_entries == 0:
        return inner
    return CachedEmbedder(inner, max_entries=config.cache.max_entries)


__all__ = [
    "AutoEmbedderConfig",
    "CacheConfig",
    "EmbedderConfig",
    "EmbedderSettings",
    "HashingEmbedderConfig",
    "MiniLMEmbedderConfig",
    "OpenAIEmbedderConfig",
    "StaticEmbedderConfig",
    "build_embedder",
    "build_uncached",
    "parse_embedder_config",
    "resolve_auto",
]
