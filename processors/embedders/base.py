"""The embedder interface every embedding metric uses.

An embedder turns texts into L2-normalized float32 vectors, so cosine similarity is a
dot product. Pipeline code calls `embed` on the event loop; notebook code calls
`embed_sync`. Implementations state whether they are semantic (a model) or lexical.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np


class Embedder(ABC):
    """Texts in, one L2-normalized float32 row per text out, in order.

    `name` identifies the model (it keys caches, so two embedders with the same name
    must give the same vectors). Empty texts are allowed and yield a zero row.
    Threading: `embed` never blocks the event loop (CPU-heavy work runs in a thread);
    `embed_sync` may be called from any thread that is not running an event loop.
    """

    name: str

    @abstractmethod
    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    @abstractmethod
    def embed_sync(self, texts: Sequence[str]) -> np.ndarray: ...

    async def warm_up(self) -> None:
        """Do slow one-time setup (loading a model) now rather than on the first trace."""
        return None

    async def close(self) -> None:
        return None


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
