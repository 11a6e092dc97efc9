"""The normalized view of an assembled trace, built once and shared by every processor.

Three derived views, each built on first use from the one before: the spans read by the
convention adapters (`SpanViews`), the trace-level summary (`AgentSummary`: input,
output, agent name, whether it is an agent run) and the full `AgentTrace` with steps
and tools. Processors that need only the summary never pay for the steps. The views are
kept in the trace's `derived` views for as long as the trace is being scored; the
pipeline empties them before export, so they never outlive scoring.
"""

from __future__ import annotations

from spanscore.core.attributes import find_attribute
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace.build import (
    AgentSummary,
    SpanViews,
    build_agent_trace,
    read_span_views,
    summarize,
)
from spanscore.processors.agent_trace.model import AgentTrace

DERIVED_KEY = "agent_trace"
SUMMARY_KEY = "agent_summary"
VIEWS_KEY = "agent_span_views"
_UNREADABLE = "unreadable"  # derived values must not be None: None means "not built yet"


def agent_trace_of(trace: Trace) -> AgentTrace:
    """The normalized agent view of `trace`, built on first use."""
    return trace.derive(DERIVED_KEY, _build)


def agent_summary_of(trace: Trace) -> AgentSummary:
    """The trace-level fields of `agent_trace_of(trace)`, without building its steps."""
    return trace.derive(SUMMARY_KEY, _summarize)


def agent_name_of(trace: Trace) -> str | None:
    """From the normalized view when a processor built it, else the anchor's `gen_ai.agent.name`."""
    derived = trace.derived or {}
    view = derived.get(SUMMARY_KEY) or derived.get(DERIVED_KEY)
    if view is not None:
        return view.agent_name
    anchor = trace.anchor
    return None if anchor is None else find_attribute(anchor.attributes, "gen_ai.agent.name")


def span_views_of(trace: Trace) -> SpanViews | None:
    """The trace's spans as the convention adapters read them, with their roles (None
    when reading them hit a bug, logged once)."""
    views = trace.derive(VIEWS_KEY, _read)
    return None if views is _UNREADABLE else views


def _read(trace: Trace) -> SpanViews | str:
    views = read_span_views(trace.trace_id, list(trace.spans()))
    return _UNREADABLE if views is None else views


def _summarize(trace: Trace) -> AgentSummary:
    return summarize(span_views_of(trace))


def _build(trace: Trace) -> AgentTrace:
    return build_agent_trace(trace.trace_id, span_views_of(trace), session_id=trace.session_id)
