"""A trace metric of the user's own scored in the built-ins' combined call.

In `mode: combined` a metric of your own on `trace` is one more section of the one
scoring call (`JudgePlan.joined`): its prompt is the section's instructions, its answer
schema (from its output kind) one key of the combined schema, and its answer read as in
its own call (`UserMetric.verdict`). The call's data block is the built-ins' trace
block, which shows the user's input, the steps and the final output under its own
labels; the placeholders point there. What it does not show (retrieved documents,
`attributes.KEY` of the root) is added to the block, once for all joined metrics
(`joined_data`). Metrics on spans keep one call per span (`user_metrics`), and one
naming `{expected_output}` keeps its own call: a trace without an expected output skips
it without a call, which a section of the shared call cannot do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.judge_metrics.prompts import Line, PromptBuilder
from spanscore.processors.judge_metrics.rubrics import Judgment, Rubric, TraceFacts, malformed
from spanscore.processors.judge_metrics.user_metrics import ATTRIBUTES, EXPECTED_OUTPUT, UserMetric, target_texts

# Where the trace block shows what a placeholder names.
TRACE_LABELS = {
    "input": "user_input",
    "output": "final_output",
    "tool_calls": "the tool call steps",
    "steps": "steps",
}


@dataclass(frozen=True)
class OwnJudgment(Judgment):
    """A judgment of a metric of your own, with what its answer said (pass, category, raw score)."""

    metadata: Mapping[str, Any] = field(default_factory=dict)


class JoinedRubric(Rubric):
    """A `UserMetric` on `trace` as one rubric of the combined call."""

    def __init__(self, metric: UserMetric):
        if metric.on != "trace":
            raise ValueError(f"{metric.name}: only a metric on trace joins the combined call, not on {metric.on}")
        if EXPECTED_OUTPUT in metric.fields:
            raise ValueError(f"{metric.name}: a metric reading {{{EXPECTED_OUTPUT}}} keeps its own call")
        self.metric = metric
        self.name = metric.name

    def instructions(self, facts: TraceFacts) -> str:
        return self.metric.instructions(TRACE_LABELS)

    def schema(self, facts: TraceFacts) -> dict[str, Any]:
        return self.metric.schema()

    def parse(self, answer: Any, facts: TraceFacts) -> Judgment:
        if not isinstance(answer, Mapping):
            raise malformed(f"{self.name}: answer is not an object")
        verdict = self.metric.verdict(answer)
        return OwnJudgment(score=verdict.score, reason=verdict.explanation, metadata=verdict.metadata)

    def extra_metadata(self, judgment: Judgment | None) -> dict[str, Any]:
        return dict(judgment.metadata) if isinstance(judgment, OwnJudgment) else {}

    def data_fields(self) -> list[str]:
        """The placeholders the trace block does not show."""
        return [name for name in self.metric.fields if name not in TRACE_LABELS]


def joined_data(
    rubrics: Sequence[JoinedRubric], trace: Trace, agent: AgentTrace, builder: PromptBuilder
) -> tuple[Line, ...]:
    """The lines the joined metrics read that the trace block lacks, each field once."""
    fields = list(dict.fromkeys(name for rubric in rubrics for name in rubric.data_fields()))
    anchor = trace.anchor  # the root: whose attributes a metric's own call on trace reads
    attributes = attributes_to_dict(anchor.attributes) if anchor is not None and fields else {}
    lines: list[Line] = []
    for name in fields:
        if name.startswith(ATTRIBUTES + "."):
            value = attributes.get(name[len(ATTRIBUTES) + 1 :])
        else:
            value = target_texts(name, "trace", agent, None)
        lines.append((f"{name}: ", builder.redacted(value)))
    return tuple(lines)
