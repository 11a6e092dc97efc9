"""Embedders: texts to L2-normalized float32 vectors, for the embedding-based metrics.

- `StaticEmbedder`: semantic, MiniLM's distilled token table, numpy and `tokenizers`
  only; the base install's default.
- `HashingEmbedder`: lexical, dependency-free, deterministic.
- `MiniLMEmbedder`: semantic, all-MiniLM-L6-v2 on CPU; needs `spanscore[minilm]`.
- `OpenAIEmbedder`: any OpenAI-compatible `/v1/embeddings` endpoint.
- `CachedEmbedder`: an LRU cache in front of any of them.
- `build_embedder(config)`: the cached embedder an `embedder:` config section describes.

Names are imported on first access, so `import processors.embedders.hashing` (what the
metrics do) does not pay for the openai client or pydantic models it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spanscore.processors.embedders.base import Embedder, l2_normalize
    from spanscore.processors.embedders.cache import CachedEmbedder, EmbeddingCacheStats
    from spanscore.processors.embedders.config import (
        AutoEmbedderConfig,
        CacheConfig,
        EmbedderConfig,
        HashingEmbedderConfig,
        MiniLMEmbedderConfig,
        OpenAIEmbedderConfig,
        StaticEmbedderConfig,
        build_embedder,
        parse_embedder_config,
    )
    from spanscore.processors.embedders.hashing import HashingEmbedder
    from spanscore.processors.embedders.minilm import MiniLMEmbedder, MissingExtraError, minilm_available
    from spanscore.processors.embedders.openai_embedder import (
        EmbeddingRequestError,
        MissingAPIKeyError,
        OpenAIEmbedder,
        RetryPolicy,
    )
    from spanscore.processors.embedders.static import StaticEmbedder

_EXPORTS = {
    "Embedder": "base",
    "l2_normalize": "base",
    "CachedEmbedder": "cache",
    "EmbeddingCacheStats": "cache",
    "AutoEmbedderConfig": "config",
    "CacheConfig": "config",
    "EmbedderConfig": "config",
    "HashingEmbedderConfig": "config",
    "MiniLMEmbedderConfig": "config",
    "OpenAIEmbedderConfig": "config",
    "StaticEmbedderConfig": "config",
    "build_embedder": "config",
    "parse_embedder_config": "config",
    "HashingEmbedder": "hashing",
    "MiniLMEmbedder": "minilm",
    "MissingExtraError": "minilm",
    "minilm_available": "minilm",
    "EmbeddingRequestError": "openai_embedder",
    "MissingAPIKeyError": "openai_embedder",
    "OpenAIEmbedder": "openai_embedder",
    "RetryPolicy": "openai_embedder",
    "StaticEmbedder": "static",
}

__all__ = [
    "AutoEmbedderConfig",
    "CacheConfig",
    "EmbeddingCacheStats",
    "CachedEmbedder",
    "Embedder",
    "EmbedderConfig",
    "EmbeddingRequestError",
    "HashingEmbedder",
    "HashingEmbedderConfig",
    "MiniLMEmbedder",
    "MiniLMEmbedderConfig",
    "MissingAPIKeyError",
    "MissingExtraError",
    "OpenAIEmbedder",
    "OpenAIEmbedderConfig",
    "RetryPolicy",
    "StaticEmbedder",
    "StaticEmbedderConfig",
    "build_embedder",
    "l2_normalize",
    "minilm_available",
    "parse_embedder_config",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
