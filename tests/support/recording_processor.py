"""A processor for tests that keeps the normalized agent trace of everything it sees.

Processor type `record_agent`; it scores nothing.
"""

from __future__ import annotations

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from spanscore.processors.base import Processor


class RecordAgentConfig(ComponentConfig):
    pass


class RecordAgent(Processor):
    def __init__(self, component_id: str, config: RecordAgentConfig):
        self.traces: list[AgentTrace] = []

    async def process_trace(self, trace, session):
        self.traces.append(agent_trace_of(trace))
        return []


FACTORY = ComponentFactory("processor", "record_agent", RecordAgentConfig, RecordAgent)
