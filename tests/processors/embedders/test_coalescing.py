"""Concurrent embed calls of one loop round reach the embedder behind as one call, each
caller gets its own rows, in order; a failure reaches every caller of the batch."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from spanscore.processors.embedders.coalescing import CoalescingEmbedder
from spanscore.processors.embedders.hashing import HashingEmbedder


class Recording(HashingEmbedder):
    def __init__(self, fail: bool = False):
        super().__init__(dimension=64)
        self.batches: list[list[str]] = []
        self.fail = fail

    async def embed(self, texts):
        self.batches.append(list(texts))
        await asyncio.sleep(0.001)  # a real embedder may suspend: callers keep waiting
        if self.fail:
            raise RuntimeError("embedder down")
        return self.embed_sync(texts)


def test_concurrent_calls_become_one_batch_with_each_caller_s_rows():
    inner = Recording()
    embedder = CoalescingEmbedder(inner)
    texts = [[f"question {i}", f"answer {i}"] for i in range(50)]

    async def run():
        return await asyncio.gather(*(embedder.embed(pair) for pair in texts))

    results = asyncio.run(run())
    assert len(inner.batches) == 1 and len(inner.batches[0]) == 100
    for pair, rows in zip(texts, results):
        assert np.array_equal(rows, inner.embed_sync(pair))
    assert embedder.calls == 1 and embedder.name == inner.name


def test_a_full_batch_goes_at_once_and_later_calls_start_the_next():
    inner = Recording()
    embedder = CoalescingEmbedder(inner, max_texts=10)

    async def run():
        return await asyncio.gather(*(embedder.embed([f"t{i}", f"u{i}"]) for i in range(12)))

    results = asyncio.run(run())
    assert [len(b) for b in inner.batches] == [10, 10, 4]
    assert all(r.shape == (2, 64) for r in results)


def test_calls_of_different_rounds_are_separate_batches():
    inner = Recording()
    embedder = CoalescingEmbedder(inner)

    async def run():
        await embedder.embed(["first"])
        await embedder.embed(["second"])

    asyncio.run(run())
    assert inner.batches == [["first"], ["second"]]


def test_a_failure_reaches_every_caller_of_the_batch():
    embedder = CoalescingEmbedder(Recording(fail=True))

    async def run():
        return await asyncio.gather(*(embedder.embed([f"t{i}"]) for i in range(3)), return_exceptions=True)

    outcomes = asyncio.run(run())
    assert all(isinstance(o, RuntimeError) and str(o) == "embedder down" for o in outcomes)


def test_sync_calls_and_empty_calls_go_straight_through():
    inner = Recording()
    embedder = CoalescingEmbedder(inner)
    assert embedder.embed_sync(["a"]).shape == (1, 64)
    assert asyncio.run(embedder.embed([])).shape == (0, 64)
    with pytest.raises(ValueError):
        CoalescingEmbedder(inner, max_texts=0)
