import threading

import numpy as np
import pytest

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.cache import INITIAL_ROWS, KEY_CHARS, CachedEmbedder
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


def test_one_cache_serves_one_embedder_under_its_name():
    cached = CachedEmbedder(HashingEmbedder(dimension=32))
    assert cached.name == HashingEmbedder(dimension=32).name != HashingEmbedder(dimension=64).name


def test_long_texts_are_keyed_whole_by_their_digest():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner)
    prefix = "x" * KEY_CHARS
    texts = [prefix + " alpha", prefix + " beta", prefix + " \ud800 lone surrogate", "short"]
    first = cached.embed_sync(texts)
    assert np.array_equal(first, inner._inner.embed_sync(texts))
    assert not np.array_equal(first[0], first[1])  # same first KEY_CHARS characters, two entries
    assert np.array_equal(cached.embed_sync(texts[::-1]), first[::-1])
    assert len(inner.calls) == 1 and cached.stats().entries == 4


def test_hits_keep_their_rows_when_the_same_call_evicts_them():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner, max_entries=2)
    cached.embed_sync(["a", "b"])
    # a and b are found, then c and d take their rows: the call still returns a's and b's.
    texts = ["a", "c", "b", "d", "c"]
    assert np.array_equal(cached.embed_sync(texts), inner._inner.embed_sync(texts))
    assert inner.calls[-1] == ["c", "d"]
    stats = cached.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.entries) == (2, 4, 2, 2)


def test_the_rows_grow_with_the_entries_up_to_max_entries():
    inner = RecordingEmbedder()
    cached = CachedEmbedder(inner, max_entries=3 * INITIAL_ROWS)
    texts = [f"text {i}" for i in range(2 * INITIAL_ROWS + 7)]
    for start in range(0, len(texts), 500):
        cached.embed_sync(texts[start : start + 500])
    calls = len(inner.calls)
    assert np.array_equal(cached.embed_sync(texts), inner._inner.embed_sync(texts))
    assert len(inner.calls) == calls  # all found
    cached.clear()
    assert cached.stats().entries == 0
    assert np.array_equal(cached.embed_sync(texts[:3]), inner._inner.embed_sync(texts[:3]))


async def test_cached_remote_embedder_makes_no_request_for_known_texts(openai_server):
    cached = CachedEmbedder(OpenAIEmbedder(base_url=openai_server.base_url, api_key="k"))
    await cached.embed(["question", "answer"])
    await cached.embed(["answer", "question", "new"])
    assert [r.body["input"] for r in openai_server.requests_to("/embeddings")] == [["question", "answer"], ["new"]]
    await cached.close()


def test_max_entries_must_be_positive():
    with pytest.raises(ValueError, match="max_entries"):
        CachedEmbedder(HashingEmbedder(), max_entries=0)
