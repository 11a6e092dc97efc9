"""`tool_success` processor: the share of a trace's tool calls that did not fail; and,
with a `judge:` section, `politeness`: how polite the final reply is, asked of the judge.

This package is the template for a spanscore plugin. A plugin is an ordinary Python
package that defines a `ComponentFactory` and names it in an entry point of the
`spanscore.components` group (see pyproject.toml); once it is installed next to
spanscore, configs can use its type like a built-in one.

`tool_success` needs no LLM. It reads the normalized agent trace, so it works whatever
instrumentation produced the spans: every tool step counts, and a step with an error
is a failed call. A trace without tool calls scores 1.0 (nothing failed).

`politeness` shows a plugin asking the configured judge (`spanscore.judge_from`): the
judge rates the final reply from 1 (rude) to 5 (very polite), scored (rating - 1) / 4.
The judge's budget, cache, retries, redaction and token cap are spanscore's, and what
it spent is returned as the judge's usage (`eval.judge.*`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from spanscore import (
    DEFAULT_THRESHOLD,
    ComponentConfig,
    ComponentFactory,
    EvaluatorUsage,
    JudgeFailed,
    JudgeSection,
    MetricResult,
    PluginJudge,
    Processor,
    Provenance,
    Session,
    SpanAttribute,
    Trace,
    agent_trace_of,
    judge_from,
)

NAME = "tool_success"
POLITENESS = "politeness"
POLITENESS_INSTRUCTIONS = (
    "The trace data above holds the final reply an AI agent gave a user. Rate how polite it is, "
    "from 1 (rude or dismissive) to 5 (courteous and respectful), judging only its tone, not whether "
    'it is correct. Answer with a JSON object {"reason": "<one sentence>", "rating": <1 to 5>}.'
)
POLITENESS_SCHEMA = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "rating": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["reason", "rating"],
    "additionalProperties": False,
}


class ToolSuccessConfig(ComponentConfig):
    """`processors: {tool_success: {threshold: 0.8}}`; unknown keys are config errors.
    `judge:` (the built-in processors' section) adds the judged `politeness` metric."""

    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    judge: JudgeSection = None
    politeness_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


Output = MetricResult | SpanAttribute | EvaluatorUsage


class ToolSuccess(Processor):
    def __init__(self, component_id: str, config: ToolSuccessConfig):
        self.id = component_id
        self.config = config
        self.judge = judge_from(config.judge)  # None without a judge section to call
        # The metrics scored: an exception in a hook becomes an error result for these.
        self.metric_names = (NAME,) if self.judge is None else (NAME, POLITENESS)

    def judges(self) -> tuple:
        """The judge, so the service reports its health and spend with the built-ins'."""
        return () if self.judge is None else self.judge.judges()

    def provenance(self, metric_name: str) -> Provenance:
        if metric_name == POLITENESS and self.judge is not None:
            return self.judge.provenance(POLITENESS, POLITENESS_INSTRUCTIONS, POLITENESS_SCHEMA)
        return super().provenance(metric_name)

    async def shutdown(self, deadline: float) -> None:
        judge, self.judge = self.judge, None
        if judge is not None:
            await judge.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[Output]:
        outputs: list[Output] = [self.tool_success(trace)]
        if self.judge is not None:
            outputs.extend(await self.politeness(trace, self.judge))
        return outputs

    def tool_success(self, trace: Trace) -> MetricResult:
        threshold = self.config.threshold
        calls = agent_trace_of(trace).tool_steps
        if not calls:
            return MetricResult(
                name=NAME,
                score=1.0,
                threshold=threshold,
                explanation="No tool calls.",
                metadata={"tool_calls": 0, "failed": 0},
            )
        failed = [step for step in calls if step.error]
        succeeded = len(calls) - len(failed)
        explanation = f"{succeeded} of {len(calls)} tool calls succeeded."
        if failed:
            explanation += " Failed: " + "; ".join(f"{step.name}: {step.error}" for step in failed)
        return MetricResult(
            name=NAME,
            score=succeeded / len(calls),
            threshold=threshold,
            explanation=explanation,
            metadata={"tool_calls": len(calls), "failed": len(failed)},
        )

    async def politeness(self, trace: Trace, judge: PluginJudge) -> list[Output]:
        reply = agent_trace_of(trace).final_output
        if not reply.strip():
            return []  # nothing said to the user: nothing to rate
        threshold = self.config.politeness_threshold
        try:
            answer = await judge.ask(POLITENESS_INSTRUCTIONS, {"reply": reply}, POLITENESS_SCHEMA, name=POLITENESS)
        except JudgeFailed as failed:  # a spent budget is a skip, anything else an error
            return failed.outputs(POLITENESS, threshold)
        rating = answer.data["rating"]
        result = MetricResult(
            name=POLITENESS,
            score=(rating - 1) / 4,
            threshold=threshold,
            explanation=f"rated {rating} of 5: {answer.data['reason']}",
            metadata={"rating": rating},
        )
        return [result, answer.usage] if answer.usage.calls or answer.cached else [result]


FACTORY = ComponentFactory("processor", NAME, ToolSuccessConfig, ToolSuccess)
