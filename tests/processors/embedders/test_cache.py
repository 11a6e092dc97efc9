import threading

import numpy as np
import pytest

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.cache import CachedEmbedder
from spanscore.processors.embedders.hashing import HashingEmbedder
from spanscore.processors.embedders.openai_embedder import OpenAIEmbedder


class RecordingEmbedder(Embedder):
    """The hashing embedder, remembering every batch it was asked for."""

    def __init__(self):
        self._inner = HashingEmbedder(dimension=64)
        self.name = self._inner.name
        self.dimension = 64
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    async def embed(self, texts):
        with self._lock:
            self.calls.append(list(texts))
        return self._inner.embed_sync(texts)

    def embed_sync(self, texts):
        with self._lock:
            self.calls.append(list(texts))
        return self._inner.embed_sync(texts)


async def test_a_second_call_is_served_from_the_cache():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner)
    first = await cached.embed(["alpha", "beta"])
    second = await cached.embed(["alpha", "beta"])
    np.testing.assert_array_equal(first, second)
    assert inner.calls == [["alpha", "beta"]]
    stats = cached.stats()
    assert (stats.hits, stats.misses, stats.entries) == (2, 2, 2)
    assert stats.hit_rate == 0.5


def test_only_misses_go_to_the_inner_embedder_in_one_call():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner)
    cached.embed_sync(["alpha", "beta"])
    vectors = cached.embed_sync(["gamma", "alpha", "delta", "beta"])
    assert inner.calls[1] == ["gamma", "delta"]
    np.testing.assert_array_equal(vectors, inner._inner.embed_sync(["gamma", "alpha", "delta", "beta"]))


def test_a_text_repeated_in_a_batch_is_embedded_once():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner)
    vectors = cached.embed_sync(["same", "other", "same", "same"])
    assert inner.calls == [["same", "other"]]
    np.testing.assert_array_equal(vectors[0], vectors[2])
    np.testing.assert_array_equal(vectors[0], vectors[3])
    assert cached.stats().misses == 2


def test_the_least_recently_used_entry_is_evicted():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner, max_entries=2)
    cached.embed_sync(["a", "b"])
    cached.embed_sync(["a"])  # "a" is now the most recently used
    cached.embed_sync(["c"])  # evicts "b"
    assert cached.stats().evictions == 1 and cached.stats().entries == 2
    inner.calls.clear()
    cached.embed_sync(["a", "c", "b"])
    assert inner.calls == [["b"]]


def test_a_batch_larger_than_the_cache_still_returns_every_row():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner, max_entries=2)
    texts = ["one", "two", "three", "four"]
    np.testing.assert_array_equal(cached.embed_sync(texts), inner._inner.embed_sync(texts))
    assert cached.stats().entries == 2


def test_returned_arrays_do_not_alias_the_cache():
    cached = CachedEmbedder(RecordingEmbedder())
    first = cached.embed_sync(["alpha"])
    first[:] = 0
    assert cached.embed_sync(["alpha"]).any()


def test_empty_texts_and_empty_batches():
    cached = CachedEmbedder(RecordingEmbedder())
    vectors = cached.embed_sync(["", "word"])
    assert not vectors[0].any() and vectors[1].any()
    assert cached.embed_sync([]).shape == (0, 64)


def test_embed_sync_from_many_threads_agrees_with_the_inner_embedder():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner, max_entries=50)
    texts = [f"text {i % 80}" for i in range(400)]
    want = inner._inner.embed_sync(texts)
    failures = []

    def work(offset):
        for start in range(offset, len(texts), 40):
            batch = texts[start : start + 10]
            if not np.array_equal(cached.embed_sync(batch), want[start : start + 10]):
                failures.append(start)

    threads = [threading.Thread(target=work, args=(i * 10,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert cached.stats().entries <= 50


def test_the_key_includes_the_embedder_name():
    small, large = CachedEmbedder(HashingEmbedder(dimension=32)), CachedEmbedder(HashingEmbedder(dimension=64))
    assert small._key("x") != large._key("x")
    assert small.name == HashingEmbedder(dimension=32).name


async def test_cached_remote_embedder_makes_no_request_for_known_texts(openai_server):
    cached = CachedEmbedder(OpenAIEmbedder(base_url=openai_server.base_url, api_key="k"))
    await cached.embed(["question", "answer"])
    await cached.embed(["answer", "question", "new"])
    assert [r.body["input"] for r in openai_server.requests_to("/embeddings")] == [["question", "answer"], ["new"]]
    await cached.close()


def test_max_entries_must_be_positive():
    with pytest.raises(ValueError, match="max_entries"):
        CachedEmbedder(HashingEmbedder(), max_entries=0)
