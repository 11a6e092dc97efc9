"""A small span-level metric processor defined for tests: processor type `span_metric`.

Metric `<name>` scores each span its target chooses (`on:`, `where:`, `sample_ratio:`,
processors/span_target.py; `on: llm` by default): 0.2 for a span whose name holds
`low_on`, 1.0 otherwise, one result per span naming it. `stray: true` adds a result
naming a span the trace does not have.
"""

from __future__ import annotations

from spanscore.core.component import ComponentFactory
from spanscore.core.result import MetricResult
from spanscore.processors.base import Processor
from spanscore.processors.span_target import SpanTarget, Target

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
