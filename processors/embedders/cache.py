"""An LRU cache of embeddings in front of any embedder.

Agents repeat themselves: the same system prompt, tool results and user questions come
back trace after trace, and a remote or model embedder pays for each. Entries are keyed
by (embedder name, sha256 of the UTF-8 text), so the key is small whatever the text's
length and the cache cannot hand one model's vector to another.

A call looks every text up, sends the distinct misses to the inner embedder in one call
(a text repeated within the batch is embedded once), stores what came back, and
assembles the rows in input order. Stored rows are read-only; callers get fresh arrays.

Threading: the table and counters sit behind one lock held only for lookups and inserts,
never across the inner call, so `embed_sync` may be called from many threads. Two
concurrent calls that miss on the same text may both embed it; the second insert just
refreshes the entry. `embed` never blocks the event loop beyond those short critical
sections.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spanscore.processors.embedders.base import Embedder

DEFAULT_MAX_ENTRIES = 10_000

_Key = tuple[str, bytes]


@dataclass(frozen=True)
class EmbeddingCacheStats:
    hits: int  # texts answered from the cache
    misses: int  # distinct texts the inner embedder had to embed
    evictions: int
    entries: int
    max_entries: int

    @property
    def hit_rate(self) -> float:
        looked_up = self.hits + self.misses
        return self.hits / looked_up if looked_up else 0.0


class CachedEmbedder(Embedder):
    """`inner` behind an LRU cache of at most `max_entries` vectors. Same name as `inner`:
    caching does not change what the vectors are."""

    def __init__(self, inner: Embedder, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.inner = inner
        self.name = inner.name
        self.max_entries = max_entries
        self._entries: OrderedDict[_Key, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries})"

    @property
    def dimension(self) -> int | None:
        return getattr(self.inner, "dimension", None)

    def stats(self) -> EmbeddingCacheStats:
        with self._lock:
            return EmbeddingCacheStats(self._hits, self._misses, self._evictions, len(self._entries), self.max_entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys, found, missing = self._lookup(texts)
        vectors = await self.inner.embed(list(missing)) if missing else None
        return self._finish(keys, found, missing, vectors)

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        keys, found, missing = self._lookup(texts)
        vectors = self.inner.embed_sync(list(missing)) if missing else None
        return self._finish(keys, found, missing, vectors)

    async def warm_up(self) -> None:
        await self.inner.warm_up()

    async def close(self) -> None:
        await self.inner.close()

    # -- internals -------------------------------------------------------------------
    def _key(self, text: str) -> _Key:
        # surrogatepass: a lone surrogate (from mangled JSON) must not make lookups raise
        return self.name, hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()

    def _lookup(self, texts: Sequence[str]) -> tuple[list[_Key], dict[_Key, np.ndarray], dict[str, _Key]]:
        """(key per text, cached rows by key, distinct missing texts in first-seen order)."""
        keys = [self._key(text) for text in texts]
        found: dict[_Key, np.ndarray] = {}
        missing: dict[str, _Key] = {}
        with self._lock:
            for text, key in zip(texts, keys):
                if key in found or text in missing:
                    if key in found:
                        self._hits += 1
                    continue
                row = self._entries.get(key)
                if row is None:
                    missing[text] = key
                else:
                    self._entries.move_to_end(key)
                    found[key] = row
                    self._hits += 1
            self._misses += len(missing)
        return keys, found, missing

    def _finish(
        self,
        keys: list[_Key],
        found: dict[_Key, np.ndarray],
        missing: dict[str, _Key],
        vectors: np.ndarray | None,
    ) -> np.ndarray:
        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape[0] != len(missing):
                raise RuntimeError(f"{self.inner!r} returned {vectors.shape[0]} rows for {len(missing)} texts")
            with self._lock:
                for key, row in zip(missing.values(), vectors):
                    stored = row.copy()
                    stored.setflags(write=False)
                    found[key] = stored
                    self._entries[key] = stored
                    self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
                    self._evictions += 1
        if not keys:
            width = self.dimension if vectors is None else vectors.shape[1]
            return np.zeros((0, width or 0), dtype=np.float32)
        return np.stack([found[key] for key in keys])


__all__ = ["DEFAULT_MAX_ENTRIES", "EmbeddingCacheStats", "CachedEmbedder"]
