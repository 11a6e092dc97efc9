"""Concurrent `embed` calls coalesced into one call to the embedder behind.

Traces are scored by many concurrent workers of one event loop; each asks for its own
two or three texts. Asking the embedder once per trace pays its fixed cost per call
(a tokenizer call, a model forward pass, an HTTP request) per trace. Here the first call
of a loop round opens a batch and schedules its flush for the next round; every call
made before then joins it; the flush embeds all their texts in one call (at most
`max_texts`; a fuller batch is flushed at once) and hands each caller its rows.

A failure of the batched call fails every caller in it, as each would have failed
alone. `embed_sync` is not coalesced: it has no loop to wait on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from spanscore.processors.embedders.base import Embedder

DEFAULT_MAX_TEXTS = 512


class CoalescingEmbedder(Embedder):
    def __init__(self, inner: Embedder, max_texts: int = DEFAULT_MAX_TEXTS):
        if max_texts < 1:
            raise ValueError(f"max_texts must be at least 1, got {max_texts}")
        self.inner = inner
        self.name = inner.name  # the vectors are the inner embedder's
        self.max_texts = max_texts
        self._pending: list[tuple[Sequence[str], asyncio.Future]] = []
        self._pending_texts = 0
        self._flush_handle: asyncio.Handle | None = None
        self.calls = 0  # batched calls made to the inner embedder

    def __repr__(self) -> str:
        return f"CoalescingEmbedder({self.inner!r}, max_texts={self.max_texts})"

    @property
    def dimension(self) -> int | None:
        return getattr(self.inner, "dimension", None)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return await self.inner.embed(texts)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((list(texts), future))
        self._pending_texts += len(texts)
        if self._pending_texts >= self.max_texts:
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = loop.call_soon(self._flush)
        return await future

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_sync(texts)

    async def warm_up(self) -> None:
        await self.inner.warm_up()

    async def close(self) -> None:
        await self.inner.close()

    def _flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        batch, self._pending, self._pending_texts = self._pending, [], 0
        if batch:
            self.calls += 1
            task = asyncio.ensure_future(self.inner.embed([text for texts, _ in batch for text in texts]))
            task.add_done_callback(lambda done: _hand_out(done, batch))


def _hand_out(done: asyncio.Future, batch: list[tuple[Sequence[str], asyncio.Future]]) -> None:
    error = asyncio.CancelledError() if done.cancelled() else done.exception()
    if error is not None:
        for _, future in batch:
            if not future.done():
                future.set_exception(error)
        return
    vectors, start = done.result(), 0
    for texts, future in batch:
        if not future.done():  # a caller cancelled meanwhile
            future.set_result(vectors[start : start + len(texts)])
        start += len(texts)
