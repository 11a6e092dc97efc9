"""What a metric scores: the trace (the default), its session, or spans of one kind.

A metric's settings say it with `on: trace | session | llm | tool | retrieval | agent`,
narrowed by `where:` (a filterset as for `score.include`, core.filterset, matched on
each span and its resource) and `sample_ratio` (the share of the matching spans scored,
decided by a hash of the trace id and span id: every replica and every re-run picks the
same spans). A processor scoring spans asks `select(trace)` for the steps to score (or
`span_ids(trace)` for agent spans, which are no step) and returns one `MetricResult`
per span, its `span_id` set: the score writer puts each on its span and rolls the
metric up on the root (docs/score-encoding.md).

`SpanTarget` is a config model: a metric's settings inherit it to take the three keys
at their own level (`metrics.faithfulness.on: llm`). A metric that can score one kind
only (rag_metrics' `faithfulness`: LLM spans) sets `fixed_on` and defaults `on` to that
kind: `where` and `sample_ratio` still narrow its spans, another `on` is an error.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar, Literal

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pydantic import Field, field_validator, model_validator

from spanscore.core.attributes import find_attribute
from spanscore.core.component import ComponentConfig
from spanscore.core.filterset import Filterset, MatchProperties
from spanscore.core.sampling import span_sampled
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import Step, agent_trace_of, span_views_of
from spanscore.processors.agent_trace.spans import AGENT, LLM, RETRIEVAL, TOOL

SPAN_KINDS = (LLM, TOOL, RETRIEVAL, AGENT)  # the kinds `on:` may name, beside trace and session
STEP_KINDS = (LLM, TOOL, RETRIEVAL)  # those that are steps of the normalized view
OTHER_SPAN = "span"  # the kind of a span that is none of them (a chain, an HTTP call)

Target = Literal["trace", "session", "llm", "tool", "retrieval", "agent"]


class SpanTarget(ComponentConfig):
    on: Target = "trace"
    where: MatchProperties | None = None  # which spans of the kind: all when not given
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)  # the share of them scored
    fixed_on: ClassVar[bool] = False  # True: `on` takes its default only

    @model_validator(mode="before")
    @classmethod
    def _bare_on(cls, data: Any) -> Any:
        # YAML 1.1 (PyYAML) reads a bare `on` key as true: it is the only key read so.
        if isinstance(data, dict) and True in data and "on" not in data:
            data = dict(data)
            data["on"] = data.pop(True)
        return data

    @field_validator("on")
    @classmethod
    def _on_fixed(cls, on: str) -> str:
        kind = cls.model_fields["on"].default
        if cls.fixed_on and on != kind:
            raise ValueError(
                f"this metric scores {kind} spans only: leave on out, narrow them with where and sample_ratio"
            )
        return on

    @model_validator(mode="after")
    def _spans_only(self) -> SpanTarget:
        if not self.per_span and (self.where is not None or self.sample_ratio != 1.0):
            raise ValueError(f"where and sample_ratio choose spans: give on: {'|'.join(SPAN_KINDS)} with them")
        return self

    @property
    def per_span(self) -> bool:
        """Whether the metric scores spans (one result per span, each naming its span)."""
        return self.on in SPAN_KINDS

    @cached_property
    def _filterset(self) -> Filterset | None:
        return None if self.where is None else Filterset(self.where)

    def select(self, trace: Trace) -> list[Step]:
        """The steps of the target's kind (llm, tool or retrieval) that it scores, in the
        trace's step order: each of a span of its own (a tool call seen only in a model's
        output has none), matching `where`, within `sample_ratio`."""
        if self.on not in STEP_KINDS:
            raise ValueError(f"on: {self.on} targets no steps; select() takes on: {'|'.join(STEP_KINDS)}")
        steps = [step for step in agent_trace_of(trace).steps if step.kind == self.on and step.from_span]
        if not steps or (self.where is None and self.sample_ratio >= 1.0):
            return steps
        chosen = self._chosen(trace, {step.span_id for step in steps})
        return [step for step in steps if step.span_id in chosen]

    def span_ids(self, trace: Trace) -> list[str]:
        """The ids (hex) of the spans of the target's kind that it scores, in start order:
        for `agent`, the spans the conventions mark as an agent's run."""
        if not self.per_span:
            raise ValueError(f"on: {self.on} targets no spans")
        if self.on in STEP_KINDS:
            return [step.span_id for step in self.select(trace)]
        views = span_views_of(trace)
        candidates = [] if views is None else [view.span_id for view in views.views if view.role == AGENT]
        if not candidates:
            return []
        chosen = self._chosen(trace, set(candidates))
        return [span_id for span_id in candidates if span_id in chosen]

    def _chosen(self, trace: Trace, candidates: set[str]) -> set[str]:
        """Those of the `candidates` (hex ids) that match `where` and fall in the sample."""
        filterset, chosen = self._filterset, set()
        for span, resource in trace.spans():
            span_id = span.span_id.hex()
            if span_id not in candidates:
                continue
            if filterset is not None and not _matches(filterset, span, resource):
                continue
            if span_sampled(trace.trace_id, span.span_id, self.sample_ratio):
                chosen.add(span_id)
        return chosen


def _matches(filterset: Filterset, span: Span, resource: Resource) -> bool:
    service = find_attribute(resource.attributes, "service.name")
    return filterset.matches(service, span.name, [span.attributes, resource.attributes])


def span_kinds(trace: Trace, span_ids: set[str]) -> dict[str, str]:
    """The kind (llm, tool, retrieval, agent; `span` for any other) of each span of
    `span_ids` (hex) in `trace`, as the conventions read it: the score metrics' label."""
    views = span_views_of(trace)
    by_id = {} if views is None else views.by_id
    kinds = {}
    for span_id in span_ids:
        view = by_id.get(span_id)
        role = view.role if view is not None else None
        kinds[span_id] = role if role in SPAN_KINDS else OTHER_SPAN
    return kinds
