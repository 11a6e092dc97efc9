"""An LRU cache of embeddings in front of any embedder.

Agents repeat themselves: the same system prompt, tool results and user questions come
back trace after trace, and a remote or model embedder pays for each. A text of at most
`KEY_CHARS` characters (a sentence, a question) is its own key: a dict lookup, its hash
kept by the string. A longer one is keyed by the sha256 of its UTF-8, so that a key
stays small whatever the text's length. One cache serves one embedder (its name is the
inner's), so one model's vector is never handed out for another's.

A call looks every text up, sends the distinct misses to the inner embedder in one call
(a text repeated within the batch is embedded once), stores what came back, and
assembles the rows in input order. The vectors are rows of one array, grown as entries
come up to `max_entries` rows, so a call's hits are gathered by one fancy index; callers
get fresh arrays. Size: `max_entries` rows of the embedder's dimension (10,000 of 128
float32: 5 MB), plus the keys (up to `KEY_CHARS` characters each: ~5 MB of ASCII at
10,000 entries, four times that for text outside the BMP).

Threading: the table and counters sit behind one lock held only for lookups (the hits'
rows copied out under it) and inserts, never across the inner call, so `embed_sync` may
be called from many threads. Two concurrent calls that miss on the same text may both
embed it; the second insert just refreshes the entry. `embed` never blocks the event
loop beyond those short critical sections.
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
KEY_CHARS = 512  # texts up to this long key themselves; longer ones by their digest
INITIAL_ROWS = 1024

_Key = str | bytes


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
        self._slots: OrderedDict[_Key, int] = OrderedDict()  # key -> its row, least recently used first
        self._rows: np.ndarray | None = None  # the vectors, [rows, dimension]; allocated by the first insert
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, max_entries={self.max_entries})"

    @property
    def dimension(self) -> int | None:
        return getattr(self.inner, "dimension", None)

    def stats(self) -> EmbeddingCacheStats:
        with self._lock:
            return EmbeddingCacheStats(self._hits, self._misses, self._evictions, len(self._slots), self.max_entries)

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()
            self._rows = None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        lookup = self._lookup(texts)
        vectors = await self.inner.embed(lookup.missing) if lookup.missing else None
        return self._finish(lookup, vectors)

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        lookup = self._lookup(texts)
        vectors = self.inner.embed_sync(lookup.missing) if lookup.missing else None
        return self._finish(lookup, vectors)

    async def warm_up(self) -> None:
        await self.inner.warm_up()

    async def close(self) -> None:
        await self.inner.close()

    # -- internals -------------------------------------------------------------------
    def _lookup(self, texts: Sequence[str]) -> _Lookup:
        keys = [text if len(text) <= KEY_CHARS else _digest(text) for text in texts]
        lookup = _Lookup(len(texts))
        missing: dict[_Key, int] = {}  # distinct missing keys, by their index among the misses
        hit_slots: list[int] = []
        with self._lock:
            slots = self._slots
            for at, key in enumerate(keys):
                slot = slots.get(key)
                if slot is not None:
                    slots.move_to_end(key)
                    lookup.hit_at.append(at)
                    hit_slots.append(slot)
                    continue
                index = missing.get(key)
                if index is None:
                    index = missing[key] = len(lookup.missing)
                    lookup.missing.append(texts[at])
                lookup.miss_at.append(at)
                lookup.miss_index.append(index)
            if hit_slots:  # copied out now: a later insert may reuse an evicted entry's row
                if self._rows is None:  # the first insert allocates them before any slot exists
                    raise RuntimeError("the embedding cache has slots but no rows")
                lookup.hit_rows = self._rows[hit_slots]
            self._hits += len(hit_slots)
            self._misses += len(missing)
        lookup.missing_keys = list(missing)
        return lookup

    def _finish(self, lookup: _Lookup, vectors: np.ndarray | None) -> np.ndarray:
        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(lookup.missing):
                raise RuntimeError(f"{self.inner!r} returned {vectors.shape[0]} rows for {len(lookup.missing)} texts")
            self._insert(lookup.missing_keys, vectors)
        if vectors is not None:
            width = vectors.shape[1]
        elif lookup.hit_rows is not None:
            width = lookup.hit_rows.shape[1]
        else:
            width = self.dimension or 0
        out = np.empty((lookup.count, width), dtype=np.float32)
        if lookup.hit_rows is not None:
            out[lookup.hit_at] = lookup.hit_rows
        if vectors is not None:
            out[lookup.miss_at] = vectors[lookup.miss_index]
        return out

    def _insert(self, keys: list[_Key], vectors: np.ndarray) -> None:
        # A batch of more than max_entries distinct texts keeps its last ones, as if
        # each had been inserted and the oldest evicted.
        keys, vectors = keys[-self.max_entries :], vectors[-self.max_entries :]
        with self._lock:
            slots = self._slots
            if self._rows is None:
                self._rows = np.empty((min(self.max_entries, INITIAL_ROWS), vectors.shape[1]), dtype=np.float32)
            elif self._rows.shape[1] != vectors.shape[1]:
                raise RuntimeError(
                    f"{self.inner!r} returned rows of {vectors.shape[1]} values, not {self._rows.shape[1]}"
                )
            taken: list[int] = []
            for key in keys:
                slot = slots.get(key)
                if slot is not None:  # another call inserted it meanwhile
                    slots.move_to_end(key)
                elif len(slots) < self.max_entries:
                    slot = slots[key] = len(slots)
                else:
                    _, slot = slots.popitem(last=False)
                    slots[key] = slot
                    self._evictions += 1
                taken.append(slot)
            if len(slots) > len(self._rows):
                grown = np.empty(
                    (min(self.max_entries, max(len(slots), 2 * len(self._rows))), vectors.shape[1]), dtype=np.float32
                )
                grown[: len(self._rows)] = self._rows
                self._rows = grown
            self._rows[taken] = vectors


class _Lookup:
    """One call's texts as the cache found them: where the hits go (their rows copied
    out), and the distinct misses for the inner embedder and where each goes."""

    __slots__ = ("count", "hit_at", "hit_rows", "miss_at", "miss_index", "missing", "missing_keys")

    def __init__(self, count: int):
        self.count = count
        self.hit_at: list[int] = []
        self.hit_rows: np.ndarray | None = None
        self.miss_at: list[int] = []
        self.miss_index: list[int] = []  # per miss, its text's index in `missing`
        self.missing: list[str] = []
        self.missing_keys: list[_Key] = []


def _digest(text: str) -> bytes:
    # surrogatepass: a lone surrogate (from mangled JSON) must not make lookups raise
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


__all__ = ["DEFAULT_MAX_ENTRIES", "KEY_CHARS", "EmbeddingCacheStats", "CachedEmbedder"]
