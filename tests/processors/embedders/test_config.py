import logging

import pytest

from spanscore.config.loader import _validate
from spanscore.core.component import ComponentConfig
from spanscore.processors.embedders import config as embedder_config
from spanscore.processors.embedders import minilm
from spanscore.processors.embedders.cache import CachedEmbedder
from spanscore.processors.embedders.coalescing import CoalescingEmbedder
from spanscore.processors.embedders.config import (
    AutoEmbedderConfig,
    EmbedderConfig,
    HashingEmbedderConfig,
    OpenAIEmbedderConfig,
    build_embedder,
    parse_embedder_config,
)
from spanscore.processors.embedders.hashing import HashingEmbedder
from spanscore.processors.embedders.minilm import MissingExtraError
from spanscore.processors.embedders.openai_embedder import MissingAPIKeyError, OpenAIEmbedder
from spanscore.processors.embedders.static import StaticEmbedder


class MetricSettings(ComponentConfig):
    """How a processor embeds the union in its own config."""

    embedder: EmbedderConfig = AutoEmbedderConfig()


def problems(data) -> list[str]:
    """What the config loader lists for `data` as a processor's settings."""
    found: list[str] = []
    _validate(MetricSettings, data, "processors.coherence", found, set())
    return found


@pytest.fixture
def fresh_auto(monkeypatch):
    monkeypatch.setattr(embedder_config, "_auto_choice", None)


def test_the_type_selects_the_model_and_defaults_fill_in():
    assert isinstance(parse_embedder_config({"type": "hashing"}), HashingEmbedderConfig)
    settings = parse_embedder_config({"type": "openai", "timeout": "1500ms", "base_url": "http://x/v1"})
    assert isinstance(settings, OpenAIEmbedderConfig)
    assert settings.timeout == 1.5 and settings.batch_size == 128 and settings.max_concurrency == 4
    assert settings.cache.max_entries == 10_000


def test_a_mapping_without_type_means_auto():
    assert isinstance(parse_embedder_config({}), AutoEmbedderConfig)
    assert isinstance(parse_embedder_config(None), AutoEmbedderConfig)
    assert isinstance(MetricSettings().embedder, AutoEmbedderConfig)


def test_a_bad_value_names_its_key():
    assert problems({"embedder": {"type": "openai", "batch_size": 0}}) == [
        "processors.coherence.embedder.batch_size: Input should be greater than or equal to 1 (got 0)"
    ]


def test_an_unknown_key_is_named():
    assert problems({"embedder": {"type": "hashing", "dimensions": 512}}) == [
        "processors.coherence.embedder.dimensions: unknown key"
    ]


def test_an_unknown_type_is_named():
    [problem] = problems({"embedder": {"type": "word2vec"}})
    assert problem.startswith("processors.coherence.embedder.type: unknown embedder type")
    assert "'static', 'hashing', 'minilm', 'openai', 'auto'" in problem and "word2vec" in problem


def test_bad_durations_and_cache_sizes_are_named():
    found = problems({"embedder": {"type": "openai", "timeout": "soon", "cache": {"max_entries": -1}}})
    assert any(p.startswith("processors.coherence.embedder.timeout:") and "duration" in p for p in found)
    assert any(p.startswith("processors.coherence.embedder.cache.max_entries:") for p in found)


def base(embedder):
    """The embedder under the cache and the batching."""
    while hasattr(embedder, "inner"):
        embedder = embedder.inner
    return embedder


def test_build_embedder_batches_the_misses_of_its_cache():
    embedder = build_embedder({"type": "hashing", "dimension": 256, "cache": {"max_entries": 5}})
    assert isinstance(embedder, CachedEmbedder) and embedder.max_entries == 5
    assert isinstance(embedder.inner, CoalescingEmbedder)
    assert isinstance(base(embedder), HashingEmbedder) and base(embedder).dimension == 256


def test_a_zero_sized_cache_means_no_cache():
    embedder = build_embedder({"type": "hashing", "cache": {"max_entries": 0}})
    assert isinstance(embedder, CoalescingEmbedder) and isinstance(base(embedder), HashingEmbedder)


def test_build_embedder_builds_openai_from_config(openai_server):
    embedder = build_embedder(
        {
            "type": "openai",
            "base_url": openai_server.base_url,
            "api_key": "k",
            "timeout": "2s",
            "max_retries": 1,
            "batch_size": 2,
            "max_embedder_wait": "2m",
        }
    )
    inner = base(embedder)
    assert isinstance(inner, OpenAIEmbedder)
    assert (inner.timeout_s, inner.retry.max_retries, inner.batch_size) == (2.0, 1, 2)
    assert inner.breaker.max_wait_s == 120.0
    assert embedder.embed_sync(["a", "b", "c"]).shape == (3, 8)


def test_openai_without_a_key_fails_at_build(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError):
        build_embedder({"type": "openai"})


def test_auto_picks_the_static_table_without_the_extra_and_logs_it_once(monkeypatch, fresh_auto, caplog):
    monkeypatch.setattr(minilm, "REQUIRED_MODULES", ("spanscore_no_such_module",))
    with caplog.at_level(logging.INFO, logger=embedder_config.__name__):
        first = build_embedder({"type": "auto"})
        second = build_embedder({})
    assert isinstance(base(first), StaticEmbedder) and isinstance(base(second), StaticEmbedder)
    messages = [r.getMessage() for r in caplog.records if r.name == embedder_config.__name__]
    assert len(messages) == 1 and "static" in messages[0] and "spanscore[minilm]" in messages[0]


def test_auto_picks_minilm_when_the_extra_is_installed(fresh_auto, caplog):
    if minilm.missing_modules():
        pytest.skip("the minilm extra is not installed")
    with caplog.at_level(logging.INFO, logger=embedder_config.__name__):
        embedder = build_embedder({"type": "auto", "cache": {"max_entries": 3}})
    assert isinstance(base(embedder), minilm.MiniLMEmbedder) and embedder.max_entries == 3
    assert not base(embedder).loaded  # choosing it does not load it
    assert any("minilm" in r.getMessage() for r in caplog.records)


def test_minilm_without_the_extra_fails_at_build(monkeypatch):
    monkeypatch.setattr(minilm, "REQUIRED_MODULES", ("spanscore_no_such_module",))
    with pytest.raises(MissingExtraError, match=r"spanscore\[minilm\]"):
        build_embedder({"type": "minilm"})
