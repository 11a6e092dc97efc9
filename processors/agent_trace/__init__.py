"""The normalized agent trace every metric reads, built from any supported convention.

Supported: OpenTelemetry GenAI (current and legacy), OpenInference, OpenLLMetry,
Langfuse and Vercel AI SDK span attributes; steps are model calls, tool calls and
retrievals (retrievers, rerankers, vector-store queries). See `build` for how the conventions are combined.
"""

from spanscore.processors.agent_trace.build import AgentSummary, SpanViews, build_agent_trace
from spanscore.processors.agent_trace.model import AgentTrace, Document, Message, Step, ToolCall, ToolDefinition
from spanscore.processors.agent_trace.of_trace import agent_name_of, agent_summary_of, agent_trace_of, span_views_of
from spanscore.processors.agent_trace.spans import SpanView

__all__ = [
    "AgentSummary",
    "AgentTrace",
    "Document",
    "Message",
    "SpanView",
    "SpanViews",
    "Step",
    "ToolCall",
    "ToolDefinition",
    "agent_name_of",
    "agent_summary_of",
    "agent_trace_of",
    "build_agent_trace",
    "span_views_of",
]
