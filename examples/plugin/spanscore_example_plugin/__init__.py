"""`tool_success` processor: the share of a trace's tool calls that did not fail.

This package is the template for a spanscore plugin. A plugin is an ordinary Python
package that defines a `ComponentFactory` and names it in an entry point of the
`spanscore.components` group (see pyproject.toml); once it is installed next to
spanscore, configs can use its type like a built-in one.

The metric needs no LLM. It reads the normalized agent trace, so it works whatever
instrumentation produced the spans: every tool step counts, and a step with an error
is a failed call. A trace without tool calls scores 1.0 (nothing failed).
"""

from __future__ import annotations

from pydantic import Field

from spanscore import (
    DEFAULT_THRESHOLD,
    ComponentConfig,
    ComponentFactory,
    MetricResult,
    Processor,
    Session,
    Trace,
    agent_trace_of,
)

NAME = "tool_success"


class ToolSuccessConfig(ComponentConfig):
    """`processors: {tool_success: {threshold: 0.8}}`; unknown keys are config errors."""

    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


class ToolSuccess(Processor):
    metric_names = (NAME,)

    def __init__(self, component_id: str, config: ToolSuccessConfig):
        self.id = component_id
        self.config = config

    async def process_trace(self, trace: Trace, session: Session | None) -> list[MetricResult]:
        threshold = self.config.threshold
        calls = agent_trace_of(trace).tool_steps
        if not calls:
            return [
                MetricResult(
                    name=NAME,
                    score=1.0,
                    threshold=threshold,
                    explanation="No tool calls.",
                    metadata={"tool_calls": 0, "failed": 0},
                )
            ]
        failed = [step for step in calls if step.error]
        succeeded = len(calls) - len(failed)
        explanation = f"{succeeded} of {len(calls)} tool calls succeeded."
        if failed:
            explanation += " Failed: " + "; ".join(f"{step.name}: {step.error}" for step in failed)
        return [
            MetricResult(
                name=NAME,
                score=succeeded / len(calls),
                threshold=threshold,
                explanation=explanation,
                metadata={"tool_calls": len(calls), "failed": len(failed)},
            )
        ]


FACTORY = ComponentFactory("processor", NAME, ToolSuccessConfig, ToolSuccess)
