"""Coherence: does the agent's output follow from its input, by embedding distance.

score = 1 - cosine_distance(embed(input), embed(output)), clamped to [0, 1]. Since
cosine distance is 1 - cosine similarity, the score is the cosine similarity itself,
with anti-correlated (negative cosine) pairs clamped to 0. No judge call is made.

`coherence_from_vectors` is the core the pipeline calls with vectors it embedded once
per trace; `coherence` embeds the two texts and calls it, so both give the same result.
The cosine helper and the default embedder live here too because loop detection
compares embeddings the same way.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult

if TYPE_CHECKING:
    from spanscore.processors.embedders.base import Embedder

NAME = "coherence"

# Metadata figures keep 4 decimals, as docs/metrics.md says ("coherence_gap": 0.1234). Only
# metadata is rounded; scores keep full precision.
METADATA_DECIMALS = 4


@functools.cache
def default_embedder() -> Embedder:
    """The base install's embedder (static, semantic, offline) when the caller passes none.

    Loaded on first use, once, so that importing the metrics never pulls in an embedder.
    """
    from spanscore.processors.embedders.static import StaticEmbedder

    return StaticEmbedder()


def as_vector(vector: np.ndarray | list[float], what: str) -> np.ndarray:
    """A 1-D float64 copy of an embedding, or ValueError naming the bad argument."""
    array = np.asarray(vector, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D vector, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what} contains non-finite values")
    return array


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two vectors, in [-1, 1].

    Embedders return unit rows, but the norms are divided out anyway so hand-made or
    cached vectors work too. A zero vector (what embedders return for a text with no
    content) is similar to nothing: its cosine with anything is 0.
    """
    if (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.ndim == 1
        and a.shape == b.shape
        and a.size
        and a.dtype.kind == "f"
        and b.dtype.kind == "f"
    ):
        # Embedder rows, the common case: three dot products, checked once at the end
        # rather than element by element (a non-finite element makes them non-finite).
        a, b = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
        ab, aa, bb = float(a @ b), float(a @ a), float(b @ b)
        if math.isfinite(ab) and math.isfinite(aa) and math.isfinite(bb):
            norms = math.sqrt(aa) * math.sqrt(bb)
            return 0.0 if norms == 0.0 else min(1.0, max(-1.0, ab / norms))
    a = as_vector(a, "first vector")
    b = as_vector(b, "second vector")
    if a.shape != b.shape:
        raise ValueError(f"vectors differ in dimension: {a.shape[0]} and {b.shape[0]}")
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    if norms == 0.0:
        return 0.0
    # Rounding can push the cosine of (nearly) parallel vectors just past +-1.
    return min(1.0, max(-1.0, float(np.dot(a, b)) / norms))


def _is_empty(text: str) -> bool:
    return not text.strip()


def coherence_from_vectors(
    input_text: str,
    output_text: str,
    input_vector: np.ndarray | None,
    output_vector: np.ndarray | None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Coherence from embeddings the caller already computed.

    The texts are needed only to recognize the empty case; the vectors may be None
    when a text is empty (or whitespace only), since they are not read then.
    """
    empty = [what for what, text in (("input", input_text), ("output", output_text)) if _is_empty(text)]
    if empty:
        # The metric's definition (docs/metrics.md): either side empty scores 1.0 with a
        # note that coherence was assumed. An empty side gives nothing to be
        # incoherent with, so no gap is measured (and none is reported).
        return MetricResult(
            name=NAME,
            score=1.0,
            threshold=threshold,
            explanation=f"Coherence assumed: the {' and '.join(empty)} {'was' if len(empty) == 1 else 'were'} empty.",
            metadata={"coherence_assumed": True, "empty": empty},
        )
    if input_vector is None or output_vector is None:
        raise ValueError("input_vector and output_vector are required when both texts have content")
    similarity = cosine_similarity(input_vector, output_vector)
    # 1 - (1 - similarity) is the similarity; clamping maps opposed texts to 0.
    score = min(1.0, max(0.0, similarity))
    gap = 1.0 - similarity
    return MetricResult(
        name=NAME,
        score=score,
        threshold=threshold,
        explanation=f"Cosine similarity {similarity:.2f} between input and output (distance {gap:.2f}).",
        metadata={"coherence_gap": round(gap, METADATA_DECIMALS)},
    )


def coherence(
    input_text: str,
    output_text: str,
    *,
    embedder: Embedder | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Coherence of one trace's input and output, embedding both texts with `embedder`.

    Uses `HashingEmbedder()` when no embedder is given. Blocking: call it off the event
    loop (it uses `embed_sync`).
    """
    if _is_empty(input_text) or _is_empty(output_text):
        return coherence_from_vectors(input_text, output_text, None, None, threshold)
    embedder = embedder if embedder is not None else default_embedder()
    vectors = embedder.embed_sync([input_text, output_text])
    return coherence_from_vectors(input_text, output_text, vectors[0], vectors[1], threshold)


__all__ = [
    "METADATA_DECIMALS",
    "NAME",
    "as_vector",
    "coherence",
    "coherence_from_vectors",
    "cosine_similarity",
    "default_embedder",
]
