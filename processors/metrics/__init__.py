"""The metrics that need no judge: embedding and arithmetic metrics, as pure functions.

Each takes plain values and returns a `MetricResult`, so it can be called from a
notebook as well as from the pipeline:

    from spanscore.processors.metrics import agent_reliability, coherence
    coherence("What is the capital of France?", "Paris is the capital of France.")

The `*_from_vectors` functions are the cores the pipeline calls with embeddings it
computed once per trace; the text-level functions wrap them, so a notebook gets the
same results the pipeline writes on spans.
"""

from spanscore.processors.metrics.coherence import coherence, coherence_from_vectors, cosine_similarity
from spanscore.processors.metrics.loop_detection import PreviousOutput, loop_detection, loop_detection_from_vectors
from spanscore.processors.metrics.session_metrics import DEFAULT_SIGNAL_WEIGHTS, agent_consistency, agent_reliability
from spanscore.processors.metrics.text import jaccard, word_set

__all__ = [
    "DEFAULT_SIGNAL_WEIGHTS",
    "PreviousOutput",
    "agent_consistency",
    "agent_reliability",
    "coherence",
    "coherence_from_vectors",
    "cosine_similarity",
    "jaccard",
    "loop_detection",
    "loop_detection_from_vectors",
    "word_set",
]
