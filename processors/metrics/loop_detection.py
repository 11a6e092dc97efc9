"""Loop detection: is the agent repeating an earlier output of the same session?

The current output is compared with the outputs of the last `window` traces of its
session. Per pair, hybrid = cosine(embeddings) × jaccard(word sets); the score is
1 - max(hybrid), clamped to [0, 1]. Multiplying the two asks for outputs that are both
about the same thing and worded the same way: enumerating related items (similar
meaning, different words) is exploration, not a loop.

The pipeline keeps one `PreviousOutput` (vector + word set) per scored trace of a
session, so each output is embedded and tokenized once; `loop_detection_from_vectors`
takes those. `loop_detection` embeds texts and calls it, so both give the same result.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.processors.metrics.coherence import METADATA_DECIMALS, as_vector, cosine_similarity, default_embedder
from spanscore.processors.metrics.text import jaccard, word_set

if TYPE_CHECKING:
    from spanscore.processors.embedders.base import Embedder

NAME = "loop_detection"
DEFAULT_WINDOW = 3


@dataclass(frozen=True, eq=False)
class PreviousOutput:
    """What loop detection remembers of one earlier trace of the session.

    `trace_index` is the trace's 0-based position in its session (in start-time
    order); it is what the result's `comparisons` report. The vector is copied and made
    read-only, so a stored entry cannot change under the session that keeps it.
    """

    trace_index: int
    vector: np.ndarray
    tokens: frozenset[str]

    def __post_init__(self) -> None:
        if isinstance(self.trace_index, bool) or not isinstance(self.trace_index, int) or self.trace_index < 0:
            raise ValueError(f"trace_index must be a non-negative int, got {self.trace_index!r}")
        vector = as_vector(self.vector, "PreviousOutput.vector").astype(np.float32)
        vector.setflags(write=False)
        object.__setattr__(self, "vector", vector)
        object.__setattr__(self, "tokens", frozenset(self.tokens))

    @classmethod
    def of(cls, trace_index: int, text: str, vector: np.ndarray) -> PreviousOutput:
        """The entry for an output text and its embedding."""
        return cls(trace_index=trace_index, vector=vector, tokens=word_set(text))


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int, got {window!r}")


def loop_detection_from_vectors(
    output: str | Set[str],
    output_vector: np.ndarray,
    previous: Sequence[PreviousOutput],
    *,
    window: int = DEFAULT_WINDOW,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Loop detection from embeddings and word sets the caller already computed.

    `output` is the current output text or its word set (`word_set(text)`, to tokenize
    once and reuse the set for the trace's own `PreviousOutput`). `previous` holds the
    session's earlier outputs oldest to newest; only the last `window` are compared.
    """
    _check_window(window)
    tokens = word_set(output) if isinstance(output, str) else frozenset(output)
    recent = list(previous)[-window:]
    if not recent:
        return MetricResult(
            name=NAME,
            score=1.0,
            threshold=threshold,
            explanation="No previous trace in the session to compare with.",
            metadata={"window_size": window, "comparisons": []},
        )

    comparisons = []
    hybrids = []
    for earlier in recent:
        cosine = cosine_similarity(output_vector, earlier.vector)
        lexical = jaccard(tokens, earlier.tokens)
        hybrid = cosine * lexical + 0.0  # + 0.0: a negative cosine times 0 is -0.0
        hybrids.append(hybrid)
        comparisons.append(
            {
                "trace_index": earlier.trace_index,
                "cosine_similarity": round(cosine, METADATA_DECIMALS),
                "jaccard_similarity": round(lexical, METADATA_DECIMALS),
                "hybrid_score": round(hybrid, METADATA_DECIMALS),
            }
        )
    max_hybrid = max(hybrids)
    # A negative cosine makes a negative hybrid, so 1 - max can exceed 1: clamp.
    score = min(1.0, max(0.0, 1.0 - max_hybrid))
    closest = comparisons[hybrids.index(max_hybrid)]
    return MetricResult(
        name=NAME,
        score=score,
        threshold=threshold,
        explanation=(
            f"Highest hybrid similarity {max_hybrid:.2f} (cosine {closest['cosine_similarity']:.2f} × "
            f"Jaccard {closest['jaccard_similarity']:.2f}) with trace {closest['trace_index']} "
            f"of the {len(recent)} previous compared."
        ),
        # `window_size` is the configured window, as docs/metrics.md says; `comparisons` shows
        # how many previous traces there actually were to compare with.
        metadata={
            "window_size": window,
            "max_hybrid": round(max_hybrid, METADATA_DECIMALS),
            "comparisons": comparisons,
        },
    )


def loop_detection(
    output_text: str,
    previous_outputs: Sequence[str],
    *,
    embedder: Embedder | None = None,
    window: int = DEFAULT_WINDOW,
    threshold: float = DEFAULT_THRESHOLD,
) -> MetricResult:
    """Loop detection of `output_text` against the session's earlier outputs.

    `previous_outputs` are the outputs of the session's earlier traces, oldest to
    newest. A comparison's `trace_index` is the position in `previous_outputs`, which
    is the trace's index in the session when the list starts at the session's first
    trace. Only the last `window` outputs are embedded. Uses `HashingEmbedder()` when
    no embedder is given. Blocking: call it off the event loop (it uses `embed_sync`).
    """
    _check_window(window)
    first = max(0, len(previous_outputs) - window)
    recent = list(previous_outputs[first:])
    if not recent:
        return loop_detection_from_vectors(output_text, np.zeros(1), [], window=window, threshold=threshold)
    embedder = embedder if embedder is not None else default_embedder()
    vectors = embedder.embed_sync([*recent, output_text])
    previous = [PreviousOutput.of(first + i, text, vectors[i]) for i, text in enumerate(recent)]
    return loop_detection_from_vectors(output_text, vectors[-1], previous, window=window, threshold=threshold)


__all__ = ["DEFAULT_WINDOW", "NAME", "PreviousOutput", "loop_detection", "loop_detection_from_vectors"]
