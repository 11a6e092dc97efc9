"""A processor for tests that keeps the normalized agent trace of everything it sees.

Registered as processor type `record_agent`; it scores nothing.
"""

from __future__ import annotations

from collector import registry
from processors.agent_trace import AgentTrace
from processors.base import Processor


class RecordAgentConfig(registry.ComponentConfig):
    pass


class RecordAgent(Processor):
    def __init__(self, component_id: str, config: RecordAgentConfig):
        self.traces: list[AgentTrace] = []

    async def process_trace(self, trace, session):
        self.traces.append(trace.agent_trace())
        return []


registry.register("processor", "record_agent", RecordAgentConfig, RecordAgent)
