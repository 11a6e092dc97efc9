"""An embedder whose vectors are chosen by hand, for the judge-free metrics' tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from spanscore.processors.embedders.base import Embedder, l2_normalize


class TableEmbedder(Embedder):
    """Maps each known text to a hand-chosen vector, so every cosine is computable by hand.

    Rows are L2-normalized like a real embedder's; empty texts give a zero row; an
    unknown text raises KeyError so a test notices any text it did not expect to be
    embedded. `calls` records each batch, to check what was embedded and how often.
    """

    name = "table"

    def __init__(self, table: Mapping[str, Sequence[float]]) -> None:
        self.table = {text: np.asarray(vector, dtype=np.float32) for text, vector in table.items()}
        dims = {vector.shape for vector in self.table.values()}
        assert len(dims) <= 1, f"table vectors differ in dimension: {dims}"
        self.dim = next(iter(dims))[0] if dims else 2
        self.calls: list[list[str]] = []

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = [np.zeros(self.dim, np.float32) if not text else self.table[text] for text in texts]
        return l2_normalize(np.stack(rows)) if rows else np.zeros((0, self.dim), np.float32)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_sync(texts)
