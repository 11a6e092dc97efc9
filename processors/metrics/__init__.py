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
from spanscore.processors.metrics.expected_calls import (
    ActualCall,
    CallMatch,
    ExpectedCall,
    ExpectedOutput,
    ExpectedParameter,
    json_equal,
    match_expected_calls,
    tool_call_accuracy,
)
from spanscore.processors.metrics.intervals import (
    Interval,
    mean_rate_interval,
    pass_at_k_interval,
    pass_pow_k_interval,
    success_rate_interval,
)
from spanscore.processors.metrics.loop_detection import PreviousOutput, loop_detection, loop_detection_from_vectors
from spanscore.processors.metrics.pass_at_k import pass_at_k, pass_at_k_unbiased, pass_pow_k, pass_pow_k_unbiased
from spanscore.processors.metrics.progress import (
    DEFAULT_MAX_TURNS,
    pad_progress,
    progress_auc,
    progress_per_turn,
    progress_through_turns,
    static_progress,
    success_final_turn,
)
from spanscore.processors.metrics.reliability import (
    episode_success,
    error_budget,
    mean_pairwise_similarity,
    step_success_rate,
    task_success_rate,
    trajectory_similarity,
)
from spanscore.processors.metrics.session_risk import DEFAULT_SIGNAL_WEIGHTS, agent_consistency, agent_reliability
from spanscore.processors.metrics.text import jaccard, word_set
from spanscore.processors.metrics.tool_usage import (
    DEFAULT_TOOL_WEIGHTS,
    tool_parameters,
    tool_selection,
    tool_sequence,
    tool_usage_overall,
)

__all__ = [
    "DEFAULT_MAX_TURNS",
    "DEFAULT_SIGNAL_WEIGHTS",
    "DEFAULT_TOOL_WEIGHTS",
    "ActualCall",
    "CallMatch",
    "ExpectedCall",
    "ExpectedOutput",
    "ExpectedParameter",
    "Interval",
    "PreviousOutput",
    "agent_consistency",
    "agent_reliability",
    "coherence",
    "coherence_from_vectors",
    "cosine_similarity",
    "episode_success",
    "error_budget",
    "jaccard",
    "json_equal",
    "loop_detection",
    "loop_detection_from_vectors",
    "match_expected_calls",
    "mean_pairwise_similarity",
    "mean_rate_interval",
    "pad_progress",
    "pass_at_k",
    "pass_at_k_interval",
    "pass_at_k_unbiased",
    "pass_pow_k",
    "pass_pow_k_interval",
    "pass_pow_k_unbiased",
    "progress_auc",
    "progress_per_turn",
    "progress_through_turns",
    "static_progress",
    "step_success_rate",
    "success_final_turn",
    "success_rate_interval",
    "task_success_rate",
    "tool_call_accuracy",
    "tool_parameters",
    "tool_selection",
    "tool_sequence",
    "tool_usage_overall",
    "trajectory_similarity",
    "word_set",
]
