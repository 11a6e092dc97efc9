"""spanscore: score AI-agent OpenTelemetry traces in flight.

The public Python API, re-exported here: the metrics that need no LLM as pure functions,
their `MetricResult`, and what a plugin needs to add a component (the `Processor` base
class, `ComponentConfig`, `ComponentFactory`, the `Trace` and `Session` it is lent, and
`judge_from` for the judge its `judge:` section configures, a `JudgeSection`).

    import spanscore
    spanscore.coherence("What is the capital of France?", "Paris is the capital of France.")

The collector itself runs with `spanscore run` or `python -m spanscore run`.
"""

from spanscore.core.component import Component, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import Provenance
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.session import Session, TraceSummary
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.core.version import VERSION as __version__
from spanscore.processors.agent_trace import (
    AgentSummary,
    AgentTrace,
    agent_summary_of,
    agent_trace_of,
    build_agent_trace,
)
from spanscore.processors.base import Processor
from spanscore.processors.judge_metrics.config import JudgeSection
from spanscore.processors.metrics import (
    DEFAULT_SIGNAL_WEIGHTS,
    agent_consistency,
    agent_reliability,
    coherence,
    cosine_similarity,
    jaccard,
    loop_detection,
    word_set,
)
from spanscore.processors.plugin_judge import JudgeAnswer, JudgeFailed, PluginJudge, judge_from

__all__ = [
    "DEFAULT_SIGNAL_WEIGHTS",
    "DEFAULT_THRESHOLD",
    "AgentSummary",
    "AgentTrace",
    "Component",
    "ComponentConfig",
    "ComponentFactory",
    "EvaluatorUsage",
    "Host",
    "JudgeAnswer",
    "JudgeFailed",
    "JudgeSection",
    "MetricResult",
    "PluginJudge",
    "Processor",
    "Provenance",
    "Session",
    "SpanAttribute",
    "Trace",
    "TraceSummary",
    "__version__",
    "agent_consistency",
    "agent_reliability",
    "agent_summary_of",
    "agent_trace_of",
    "build_agent_trace",
    "coherence",
    "cosine_similarity",
    "jaccard",
    "judge_from",
    "loop_detection",
    "word_set",
]
