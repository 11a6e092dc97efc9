"""The normalized agent trace every metric reads, built from any supported convention.

Supported: OpenTelemetry GenAI (current and legacy), OpenInference, OpenLLMetry and
Langfuse span attributes. See `build` for how the conventions are combined.
"""

from processors.agent_trace.build import build_agent_trace
from processors.agent_trace.model import AgentTrace, Message, Step, ToolCall, ToolDefinition

__all__ = ["AgentTrace", "Message", "Step", "ToolCall", "ToolDefinition", "build_agent_trace"]
