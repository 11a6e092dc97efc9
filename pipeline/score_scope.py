"""Which traces are scored: agent traces only by default, narrowed by include and exclude.

A collector sidecar also receives traces that are not an agent's: the HTTP server span
around it, a health check, a database call. Scoring those costs judge calls and yields
scores that mean nothing (coherence of an empty input with an empty output), and their
sessions would dilute the agent's. So a trace is scored only when the normalized agent
view recognizes an agent run in it (`AgentTrace.recognized`); anything else is forwarded
exactly as received. `agent_traces_only: false` scores every trace.

`include` and `exclude` narrow it further, in the OpenTelemetry Collector's filterset
shape (core.filterset: `match_type: strict|regexp`, `services`, `span_names`,
`attributes: [{key, value}]`): within one of them every property given must match, any
entry of `services` or `span_names` may match, and every entry of `attributes` must match on the root span
(the earliest span when no root arrived) or its resource. A trace is scored when it
matches `include` (if given) and does not match `exclude`. These are checked first, as they cost no normalization.

The `evaluate_session` carrier spans spanscore writes are never scored again: a
carrier coming back (a chained collector, a replayed file) holds results already, and
scoring it would overwrite them.
"""

from __future__ import annotations

import logging

from spanscore.core.component import ComponentConfig
from spanscore.core.filterset import Filterset, MatchProperties
from spanscore.core.once import FirstSeen
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import is_session_carrier
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import agent_summary_of

log = logging.getLogger("spanscore.pipeline")

NOT_AGENT_TRACE = (
    "not an agent trace (no agent run found in GenAI, OpenInference, OpenLLMetry, Langfuse or Vercel AI SDK attributes)"
)
SESSION_CARRIER = "a spanscore evaluate_session carrier"
NOT_INCLUDED = "not matched by score.include"
EXCLUDED = "matched by score.exclude"


class ScoreScopeConfig(ComponentConfig):
    agent_traces_only: bool = True
    include: MatchProperties | None = None
    exclude: MatchProperties | None = None


class ScoreScope:
    """Decides, per assembled trace, whether the processors see it."""

    def __init__(self, config: ScoreScopeConfig):
        self.config = config
        self.agent_traces_only = config.agent_traces_only
        self._include = None if config.include is None else TraceMatcher(config.include)
        self._exclude = None if config.exclude is None else TraceMatcher(config.exclude)

    def skip_reason(self, trace: Trace) -> str | None:
        """Why `trace` is not scored, or None when it is.

        Reads the agent summary only when `agent_traces_only` asks for it; it is kept in
        the trace's derived views for the processors that follow.
        """
        if is_session_carrier(trace):
            return SESSION_CARRIER
        if self._include is not None and not self._include.matches(trace):
            return NOT_INCLUDED
        if self._exclude is not None and self._exclude.matches(trace):
            return EXCLUDED
        if self.agent_traces_only and not agent_summary_of(trace).recognized:
            return NOT_AGENT_TRACE
        return None


class UnscoredTraces:
    """Says why traces leave unscored: once per service for traces that are not an
    agent's (a sidecar sees many), every other reason at debug level."""

    def __init__(self) -> None:
        self._services = FirstSeen()

    def said(self, trace: Trace, reason: str) -> None:
        service = trace.service_name
        if isinstance(service, str):  # the client's text: quoted, and remembered, cut short
            service = excerpt(service)
        if reason == NOT_AGENT_TRACE and self._services.first(service):
            log.info(
                "service %r: a trace is %s; such traces are forwarded unscored (said once per service; "
                "processors.assembler.score.agent_traces_only: false scores every trace)",
                service,
                reason,
            )
        else:
            log.debug("trace %s forwarded unscored: %s", trace.trace_id_hex, reason)


class TraceMatcher:
    """One `include` or `exclude`, on the trace's root span (the earliest span when no
    root arrived) and its resource."""

    def __init__(self, properties: MatchProperties):
        self._filterset = Filterset(properties)

    def matches(self, trace: Trace) -> bool:
        anchor = trace.anchor
        sources = []
        if self._filterset.reads_attributes:
            origin = trace.root_origin or next(iter(trace.spans_by_origin), None)
            sources = [a.attributes for a in (anchor,) if a is not None]
            if origin is not None:
                sources.append(origin.resource.attributes)
        return self._filterset.matches(trace.service_name, None if anchor is None else anchor.name, sources)
