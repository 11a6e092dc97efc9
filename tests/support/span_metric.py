"""A small span-level metric processor defined for tests: processor type `span_metric`.

Metric `<name>` scores each span its target chooses (`on:`, `where:`, `sample_ratio:`,
processors/span_target.py; `on: llm` by default): 0.2 for a span whose name holds
`low_on`, 1.0 otherwise, one result per span naming it. `stray: true` adds a result
naming a span the trace does not have. `agent_run()` is a run for it to score, `scored_run()` that run scored.
"""

from __future__ import annotations

import json

from spanscore.core.component import ComponentFactory
from spanscore.core.result import MetricResult
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.pipeline.score_writer import ScoreWriter
from spanscore.pipeline.scoring import Scored
from spanscore.processors.base import Processor
from spanscore.processors.span_target import SpanTarget, Target
from tests.support.agent_spans import make_span
from tests.support.spans import new_span_id, new_trace_id, request_of

STRAY_SPAN_ID = "5742a45742a45742"


class SpanMetricConfig(SpanTarget):
    on: Target = "llm"
    name: str = "span_ok"
    low_on: str = "plan"
    threshold: float = 0.5
    stray: bool = False


class SpanMetric(Processor):
    def __init__(self, component_id: str, config: SpanMetricConfig):
        self.config = config
        self.metric_names = (config.name,)

    async def process_trace(self, trace, session):
        config = self.config
        results = [
            MetricResult(
                name=config.name,
                score=0.2 if config.low_on in step.name else 1.0,
                threshold=config.threshold,
                explanation=f"span {step.name}",
                span_id=step.span_id,
            )
            for step in config.select(trace)
        ]
        if config.stray:
            results.append(MetricResult(name=config.name, score=1.0, span_id=STRAY_SPAN_ID))
        return results


FACTORY = ComponentFactory("processor", "span_metric", SpanMetricConfig, SpanMetric)


ROOT_ATTRIBUTES = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "support-bot",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Where is it?"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Soon."}]}]),
}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
NAMES = ("root", "plan", "tool", "answer", "summary")


def agent_run():
    """(trace id, span id by role, spans): three model calls, a tool call; `summary` is a
    model call the metric's `where` leaves out."""
    trace_id = new_trace_id()
    ids = {name: new_span_id() for name in NAMES}
    spans = [
        make_span(
            "invoke_agent support-bot", ROOT_ATTRIBUTES, id=ids["root"], start=1_000, end=9_000, trace_id=trace_id
        ),
        make_span("chat plan", CHAT, id=ids["plan"], parent=ids["root"], start=2_000, trace_id=trace_id),
        make_span(
            "execute_tool track",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "track"},
            id=ids["tool"],
            parent=ids["root"],
            start=3_000,
            trace_id=trace_id,
        ),
        make_span("chat answer", CHAT, id=ids["answer"], parent=ids["root"], start=4_000, trace_id=trace_id),
        make_span("chat summary", CHAT, id=ids["summary"], parent=ids["root"], start=5_000, trace_id=trace_id),
    ]
    return trace_id, ids, spans


def scored_run() -> tuple[Trace, dict[str, bytes]]:
    """`agent_run()` as the pipeline leaves it, its plan (0.2, fail) and answer (1.0, pass)
    model calls scored by `span_ok` on their spans, the roll-up on the root; the trace's
    `results` and `span_results` set, as the attach stage sets them for the exporters."""
    _, ids, spans = agent_run()
    request = request_of(spans)
    resource_spans = request.resource_spans[0]
    origin = ScopeOrigin(resource_spans, resource_spans.scope_spans[0])
    trace = Trace(spans[0].trace_id, 0.0)
    for position, one in enumerate(origin.scope_spans.spans):
        trace.add(position, one, origin)
    scored = Scored(
        results=[
            MetricResult(name="span_ok", score=0.2, explanation="span chat plan", span_id=ids["plan"].hex()),
            MetricResult(name="span_ok", score=1.0, explanation="span chat answer", span_id=ids["answer"].hex()),
        ]
    )
    scored.sort_spans(trace)
    ScoreWriter().write_in_place(trace, scored)
    trace.results, trace.span_results = scored.results, scored.span_results
    return trace, ids
