"""The normalized view of an assembled trace, built once and shared by every processor.

The view is kept in the trace's `derived` views for as long as the trace is being
scored; the pipeline empties them before export, so it never outlives scoring.
"""

from __future__ import annotations

from spanscore.core.attributes import find_attribute
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace.build import build_agent_trace
from spanscore.processors.agent_trace.model import AgentTrace

DERIVED_KEY = "agent_trace"


def agent_trace_of(trace: Trace) -> AgentTrace:
    """The normalized agent view of `trace`, built on first use."""
    return trace.derive(DERIVED_KEY, _build)


def agent_name_of(trace: Trace) -> str | None:
    """From the normalized view when a processor built it, else the anchor's `gen_ai.agent.name`."""
    agent = (trace.derived or {}).get(DERIVED_KEY)
    if agent is not None:
        return agent.agent_name
    anchor = trace.anchor
    return None if anchor is None else find_attribute(anchor.attributes, "gen_ai.agent.name")


def _build(trace: Trace) -> AgentTrace:
    return build_agent_trace(trace.trace_id, list(trace.spans()), session_id=trace.session_id)
