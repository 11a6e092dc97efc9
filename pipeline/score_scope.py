"""Which traces are scored: agent traces only by default, narrowed by include and exclude.

A collector sidecar also receives traces that are not an agent's: the HTTP server span
around it, a health check, a database call. Scoring those costs judge calls and yields
scores that mean nothing (coherence of an empty input with an empty output), and their
sessions would dilute the agent's. So a trace is scored only when the normalized agent
view recognizes an agent run in it (`AgentTrace.recognized`); anything else is forwarded
exactly as received. `agent_traces_only: false` scores every trace.

`include` and `exclude` narrow it further, in the OpenTelemetry Collector's filterset
shape (`match_type: strict|regexp`, `services`, `span_names`, `attributes: [{key,
value}]`): within one of them every property given must match, any entry of `services`
or `span_names` may match, and every entry of `attributes` must match on the root span
(the earliest span when no root arrived) or its resource. A trace is scored when it
matches `include` (if given) and does not match `exclude`. These are checked first, as they cost no normalization.

The `evaluate_session` carrier spans spanscore writes are never scored again: a
carrier coming back (a chained collector, a replayed file) holds results already, and
scoring it would overwrite them.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from spanscore.core.attributes import find_attribute
from spanscore.core.component import ComponentConfig
from spanscore.core.once import FirstSeen
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import is_session_carrier
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import agent_summary_of
from spanscore.processors.metrics.expected_calls import json_equal

log = logging.getLogger("spanscore.pipeline")

NOT_AGENT_TRACE = (
    "not an agent trace (no agent run found in GenAI, OpenInference, OpenLLMetry, Langfuse or Vercel AI SDK attributes)"
)
SESSION_CARRIER = "a spanscore evaluate_session carrier"
NOT_INCLUDED = "not matched by score.include"
EXCLUDED = "matched by score.exclude"


class AttributeMatch(ComponentConfig):
    key: str = Field(min_length=1)
    # Without a value the key being present is enough, as in the Collector.
    value: Any = None


class MatchProperties(ComponentConfig):
    match_type: Literal["strict", "regexp"] = "strict"
    services: list[str] = Field(default_factory=list)  # the resource's service.name
    span_names: list[str] = Field(default_factory=list)  # the root span's name
    attributes: list[AttributeMatch] = Field(default_factory=list)  # on the root span or its resource

    @model_validator(mode="after")
    def _usable(self) -> MatchProperties:
        if not (self.services or self.span_names or self.attributes):
            raise ValueError("give at least one of services, span_names, attributes")
        if self.match_type == "regexp":
            problems = []
            for field in ("services", "span_names"):
                for i, pattern in enumerate(getattr(self, field)):
                    problems.extend(_regex_problems(pattern, (field, i)))
            for i, attribute in enumerate(self.attributes):
                if attribute.value is not None:
                    problems.extend(_regex_problems(attribute.value, ("attributes", i, "value")))
            if problems:
                raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


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
    """One `include` or `exclude`, compiled."""

    def __init__(self, properties: MatchProperties):
        regexp = properties.match_type == "regexp"
        self._text = _searcher if regexp else _equal
        # Strict values compare with their type, as the Collector's strict match: true is not 1.
        self._value = _value_searcher if regexp else json_equal
        self._services = [_compiled(s, regexp) for s in properties.services]
        self._span_names = [_compiled(s, regexp) for s in properties.span_names]
        self._attributes = [
            (a.key, None if a.value is None else _compiled(a.value, regexp)) for a in properties.attributes
        ]

    def matches(self, trace: Trace) -> bool:
        if self._services:
            service = trace.service_name
            if not isinstance(service, str) or not any(self._text(p, service) for p in self._services):
                return False
        anchor = trace.anchor
        if self._span_names and (anchor is None or not any(self._text(p, anchor.name) for p in self._span_names)):
            return False
        if self._attributes:
            origin = trace.root_origin or next(iter(trace.spans_by_origin), None)
            sources = [a.attributes for a in (anchor,) if a is not None]
            if origin is not None:
                sources.append(origin.resource.attributes)
            for key, expected in self._attributes:
                if not any(self._found(attributes, key, expected) for attributes in sources):
                    return False
        return True

    def _found(self, attributes, key: str, expected: Any) -> bool:
        value = find_attribute(attributes, key)
        return value is not None and (expected is None or self._value(expected, value))


def _compiled(value: Any, regexp: bool) -> Any:
    return re.compile(value) if regexp else value


def _equal(expected: str, actual: str) -> bool:
    return expected == actual


def _searcher(pattern: re.Pattern[str], actual: str) -> bool:
    # Unanchored, as Go's regexp.MatchString in the Collector: anchor with ^...$.
    return pattern.search(actual) is not None


def _value_searcher(pattern: re.Pattern[str], actual: Any) -> bool:
    return isinstance(actual, str) and pattern.search(actual) is not None


def _regex_problems(pattern: Any, loc: tuple[str | int, ...]) -> list[InitErrorDetails]:
    if not isinstance(pattern, str):
        message = "must be a string (a regular expression) with match_type regexp"
    else:
        try:
            re.compile(pattern)
            return []
        except re.error as exc:
            message = f"invalid regular expression: {exc}"
    return [
        InitErrorDetails(type=PydanticCustomError("regexp", "{message}", {"message": message}), loc=loc, input=pattern)
    ]
