"""The seven LLM-judge trace metrics: what the judge is asked, the answer's schema, the result.

Each metric's definition (docs/metrics.md) names an extraction stage and a scoring
stage. Here the facts the trace already holds (user input, tools called with their
arguments, tools available) come from the `AgentTrace` and are never asked of the judge;
the rest (task, outcome, plan) is extracted once per trace by `EXTRACTION` and shared by
every metric that reads it. A rubric then only scores.

Readings of the definitions written down here (and in docs/metrics.md, Judge calls):
- argument_correctness: the verdicts and the overall reason come from one call (the
  definition's stages 2 and 3); the score is still yes / total, computed here.
- plan_adherence and plan_quality share one extracted plan.
- A metric the trace gives nothing to judge (`Rubric.skip`: tool_correctness without
  tools offered or called, argument_correctness without tool calls, the plan metrics
  without a plan) is skipped, not scored: no judge call, no score; a score there would
  be made up, and would lift the averages of runs that never faced the question.
- Metadata is as docs/metrics.md lists it, `threshold` and `success` included.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spanscore.core.redaction import Redaction
from spanscore.core.result import MetricResult
from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.trials import (
    TrialRun,
    closest_to,
    is_unit_score,
    majority,
    median,
    trials_metadata,
)

MALFORMED = "malformed_answer"
NOT_APPLICABLE = "not_applicable"  # the error_type of a metric skipped by `Rubric.skip`
NO_PLAN = "no plan found in the trace"
NO_TOOL_CALLS = "no tool calls to judge"
NO_TOOLS = "no tools offered or called"

# Extraction fields in the order prompts and schemas list them.
EXTRACT_FIELDS = ("task", "outcome", "plan")


@dataclass(frozen=True)
class TraceFacts:
    """What rubrics read besides the judge's answers, redacted like the prompts."""

    user_input: str
    tools_called: list[dict[str, Any]]
    available_tools: list[dict[str, Any]]
    extracted: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_trace(cls, trace: AgentTrace, redaction: Redaction) -> TraceFacts:
        return cls(
            user_input=redaction.value(trace.user_input),
            tools_called=[{"name": s.name, "parameters": redaction.value(s.arguments)} for s in trace.tool_steps],
            available_tools=[
                {"name": t.name, "description": redaction.value(t.description)} for t in trace.available_tools
            ],
        )

    def with_extracted(self, extracted: Mapping[str, Any]) -> TraceFacts:
        return replace(self, extracted=dict(extracted))

    def get(self, name: str) -> Any:
        if name in EXTRACT_FIELDS:
            return self.extracted.get(name)
        return getattr(self, name)


def malformed(message: str) -> JudgeError:
    return JudgeError(message, MALFORMED)


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Every property required and nothing else allowed: what strict structured outputs need.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


UNIT = {"type": "number", "minimum": 0.0, "maximum": 1.0}
REASON = {"type": "string"}


# --- extraction ------------------------------------------------------------------------

_EXTRACT_LINES = {
    "task": "- task: the user's task or goal, in one sentence.",
    "outcome": (
        "- outcome: what the agent actually did and produced, strictly factual. "
        'No judgement words such as "successfully", "correctly" or "well".'
    ),
    "plan": (
        "- plan: the agent's explicit or implied plan, from its reasoning, thoughts or "
        "messages, as a list of short steps in order. Only steps the trace shows; "
        "an empty list if the trace holds no plan."
    ),
}
_EXTRACT_SCHEMAS = {"task": REASON, "outcome": REASON, "plan": {"type": "array", "items": {"type": "string"}}}


class Extraction:
    """The one call per trace that pulls task, outcome and plan out of the trace."""

    schema_name = "extract"

    @staticmethod
    def fields(needed: set[str] | frozenset[str]) -> tuple[str, ...]:
        return tuple(name for name in EXTRACT_FIELDS if name in needed)

    @staticmethod
    def instructions(fields: Sequence[str]) -> str:
        lines = ["From the trace data above, extract:", *(_EXTRACT_LINES[f] for f in fields)]
        lines.append("Answer with a JSON object with the keys " + ", ".join(fields) + ".")
        return "\n".join(lines)

    @staticmethod
    def schema(fields: Sequence[str]) -> dict[str, Any]:
        return _object({f: _EXTRACT_SCHEMAS[f] for f in fields})

    @staticmethod
    def parse(answer: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        if not isinstance(answer, Mapping):
            raise malformed("extraction: answer is not an object")
        extracted: dict[str, Any] = {}
        for name in fields:
            value = answer.get(name)
            if name == "plan":
                if not isinstance(value, list) or not all(isinstance(step, str) for step in value):
                    raise malformed("extraction: plan must be a list of strings")
                extracted[name] = [step.strip() for step in value if step.strip()]
            else:
                if not isinstance(value, str):
                    raise malformed(f"extraction: {name} must be a string")
                extracted[name] = value.strip()
        return extracted


# --- scoring ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgment:
    """One trial's validated answer for one rubric."""

    score: float
    reason: str
    verdicts: tuple[tuple[str, str | None], ...] | None = None


class Rubric:
    """One metric: the extraction fields it reads, its instructions, schema and result."""

    name: str
    needs: frozenset[str] = frozenset()  # extraction fields
    metadata_fields: tuple[str, ...] = ()

    def skip(self, facts: TraceFacts) -> str | None:
        """Why the metric does not apply to the trace (it is then not judged and gets no
        score), or None when it does."""
        return None

    def instructions(self, facts: TraceFacts) -> str:
        raise NotImplementedError

    def schema(self, facts: TraceFacts) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, answer: Any, facts: TraceFacts) -> Judgment:
        """The answer validated; JudgeError(malformed_answer) when it is not usable."""
        raise NotImplementedError

    def votes(self, judgment: Judgment, threshold: float) -> dict[str, bool]:
        return {self.name: judgment.score >= threshold}

    def aggregate(self, judgments: Sequence[Judgment]) -> Judgment:
        scores = [j.score for j in judgments]
        score = median(scores)
        return replace(judgments[closest_to(scores, score)], score=score)

    def explanation(self, judgment: Judgment) -> str:
        return judgment.reason

    def extra_metadata(self, judgment: Judgment | None) -> dict[str, Any]:
        """Metadata from the answer itself; `None` when the metric was settled without one."""
        return {}

    def result(
        self, facts: TraceFacts, judgments: Sequence[Judgment], threshold: float, run: TrialRun | None = None
    ) -> MetricResult:
        """Trials aggregate into one result; `run` adds their spread to the metadata."""
        judgment = self.aggregate(judgments)
        metadata = self.metadata(facts, judgment.score, threshold, self.extra_metadata(judgment))
        if run is not None and run.requested > 1:
            metadata["trials"] = trials_metadata(run, [j.score for j in judgments])
        return MetricResult(
            name=self.name,
            score=judgment.score,
            threshold=threshold,
            explanation=self.explanation(judgment),
            metadata=metadata,
        )

    def metadata(
        self, facts: TraceFacts, score: float, threshold: float, extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        # Copies: results of one trace must not share mutable lists (the plan, the tools).
        metadata = {name: copy.deepcopy(facts.get(name)) for name in self.metadata_fields}
        metadata.update(extra or {})
        metadata.update(threshold=threshold, success=score >= threshold)
        return metadata


@dataclass(frozen=True, eq=False)
class ScaleRubric(Rubric):
    """A single 0..1 score (under `score_key`) and a reason."""

    name: str
    criteria: str
    score_key: str = "score"
    needs: frozenset[str] = frozenset()
    metadata_fields: tuple[str, ...] = ()
    skip_without_plan: bool = False
    skip_without_tools: bool = False

    def skip(self, facts: TraceFacts) -> str | None:
        if self.skip_without_plan and not facts.extracted.get("plan"):
            return NO_PLAN
        if self.skip_without_tools and not facts.tools_called and not facts.available_tools:
            return NO_TOOLS
        return None

    def instructions(self, facts: TraceFacts) -> str:
        return (
            f"{self.criteria}\nAnswer with a JSON object: "
            f'{{"{self.score_key}": <number from 0.0 to 1.0>, "reason": "<one or two sentences>"}}.'
        )

    def schema(self, facts: TraceFacts) -> dict[str, Any]:
        return _object({self.score_key: UNIT, "reason": REASON})

    def parse(self, answer: Any, facts: TraceFacts) -> Judgment:
        if not isinstance(answer, Mapping):
            raise malformed(f"{self.name}: answer is not an object")
        score = answer.get(self.score_key)
        if not is_unit_score(score):
            raise malformed(f"{self.name}: {self.score_key} must be a number within [0, 1], got {score!r}")
        reason = answer.get("reason")
        return Judgment(score=float(score), reason=reason.strip() if isinstance(reason, str) else "")


@dataclass(frozen=True, eq=False)
class ArgumentRubric(Rubric):
    """argument_correctness: one yes/no verdict per tool call; score = yes / total."""

    name: str = "argument_correctness"
    metadata_fields: tuple[str, ...] = ("user_input",)

    def skip(self, facts: TraceFacts) -> str | None:
        return None if facts.tools_called else NO_TOOL_CALLS

    def instructions(self, facts: TraceFacts) -> str:
        n = len(facts.tools_called)
        return (
            f"For each tool call #1 to #{n} in the trace data, in order, decide whether its "
            "arguments correctly serve the user input: right values, none missing, none wrong. "
            'verdict is "yes" or "no"; reason says what is wrong (may be empty for "yes"). '
            "Then give a short overall reason.\n"
            f'Answer with a JSON object: {{"verdicts": [{n} items of {{"verdict": "yes" or "no", '
            '"reason": "..."}], "reason": "<one or two sentences>"}.'
        )

    def schema(self, facts: TraceFacts) -> dict[str, Any]:
        n = len(facts.tools_called)
        verdict = _object({"verdict": {"type": "string", "enum": ["yes", "no"]}, "reason": REASON})
        return _object(
            {"verdicts": {"type": "array", "items": verdict, "minItems": n, "maxItems": n}, "reason": REASON}
        )

    def parse(self, answer: Any, facts: TraceFacts) -> Judgment:
        if not isinstance(answer, Mapping) or not isinstance(answer.get("verdicts"), list):
            raise malformed(f"{self.name}: answer has no verdicts list")
        items = answer["verdicts"]
        if len(items) != len(facts.tools_called):
            raise malformed(f"{self.name}: {len(items)} verdicts for {len(facts.tools_called)} tool calls")
        verdicts = []
        for item in items:
            verdict = item.get("verdict") if isinstance(item, Mapping) else None
            if verdict not in ("yes", "no"):
                raise malformed(f"{self.name}: verdict must be 'yes' or 'no', got {verdict!r}")
            reason = item.get("reason")
            verdicts.append((verdict, reason.strip() or None if isinstance(reason, str) else None))
        reason = answer.get("reason")
        yes = sum(v == "yes" for v, _ in verdicts)
        return Judgment(
            score=yes / len(verdicts),
            reason=reason.strip() if isinstance(reason, str) else "",
            verdicts=tuple(verdicts),
        )

    def votes(self, judgment: Judgment, threshold: float) -> dict[str, bool]:
        return {f"{self.name}#{i}": v == "yes" for i, (v, _) in enumerate(judgment.verdicts or (), 1)}

    def aggregate(self, judgments: Sequence[Judgment]) -> Judgment:
        if len(judgments) == 1:
            return judgments[0]
        verdicts = []
        for i in range(len(judgments[0].verdicts or ())):
            votes = [(j.verdicts or ())[i] for j in judgments]
            # A tie (failed trials left an even count) counts against the call.
            winner = majority([v for v, _ in votes], tie="no")
            verdicts.append(next(vote for vote in votes if vote[0] == winner))
        score = sum(v == "yes" for v, _ in verdicts) / len(verdicts)
        speaker = judgments[closest_to([j.score for j in judgments], score)]
        return Judgment(score=score, reason=speaker.reason, verdicts=tuple(verdicts))

    def explanation(self, judgment: Judgment) -> str:
        verdicts = judgment.verdicts or ()
        yes = sum(v == "yes" for v, _ in verdicts)
        summary = f"{yes} of {len(verdicts)} tool calls had correct arguments."
        return f"{summary} {judgment.reason}" if judgment.reason else summary

    def extra_metadata(self, judgment: Judgment | None) -> dict[str, Any]:
        verdicts = judgment.verdicts if judgment is not None else None
        return {"verdicts": [{"verdict": v, "reason": r} for v, r in verdicts or ()]}


_TASK = frozenset({"task"})
_PLAN = frozenset({"task", "plan"})

RUBRICS: dict[str, Rubric] = {
    rubric.name: rubric
    for rubric in (
        ScaleRubric(
            name="task_completion",
            score_key="verdict",
            needs=frozenset({"task", "outcome"}),
            metadata_fields=("task", "outcome"),
            criteria=(
                "Compare the extracted task with the extracted outcome and the trace: did the "
                "agent accomplish what the user asked? 1.0 perfectly accomplished; 0.75-0.99 "
                "mostly complete, minor aspects missing; 0.5-0.74 partially complete; "
                "0.25-0.49 significant gaps; 0.0-0.24 not meaningfully addressed."
            ),
        ),
        ScaleRubric(
            name="tool_correctness",
            metadata_fields=("user_input", "tools_called", "available_tools"),
            skip_without_tools=True,  # with tools offered and none called, not calling is judged
            criteria=(
                "Judge the agent's choice of tools for the user input. The tools it called are "
                "the tool call steps (name and arguments); the tools it could call are under "
                "available_tools. Lower the score for over-selection (unnecessary or redundant "
                "tools called), under-selection (useful available tools not called) and "
                "mis-selection (wrong or irrelevant tools). 1.0 exactly the tools the task "
                "needed; 0.0 entirely wrong tools."
            ),
        ),
        ArgumentRubric(),
        ScaleRubric(
            name="step_efficiency",
            needs=_TASK,
            metadata_fields=("task",),
            criteria=(
                "Score how efficiently the agent carried out the extracted task: 1.0 when every "
                "step was needed and none repeated. Lower it for redundant or duplicate tool "
                "calls, unnecessary intermediate steps, speculative work the task did not need, "
                "and verbose reasoning that adds nothing."
            ),
        ),
        ScaleRubric(
            name="confidence",
            score_key="confidence",
            criteria=(
                "Score how decisive, appropriate and well-founded the agent's actions were. "
                "Consider decisiveness (no needless hesitation or contradictory steps), "
                "appropriateness (actions relevant to the user's goal), consistency (one coherent "
                "strategy) and signs of low confidence: hedging, contradictions, needless retries, "
                "vague outputs, repeated tool calls with identical arguments, abandoned "
                "strategies. 1.0 fully decisive; 0.75 minor hesitation; 0.5 noticeable "
                "indecision; 0.25 significant uncertainty; 0.0 completely uncertain."
            ),
        ),
        ScaleRubric(
            name="plan_adherence",
            needs=_PLAN,
            metadata_fields=("task", "plan"),
            skip_without_plan=True,
            criteria=(
                "Score how closely the execution in the trace followed the extracted plan: were "
                "all planned steps executed, in the intended order, with no extraneous actions "
                "and none skipped? 1.0 execution matches the plan exactly; 0.75 minor "
                "deviations; 0.5 some steps skipped or reordered; 0.25 significant deviation; "
                "0.0 execution bears little relation to the plan."
            ),
        ),
        ScaleRubric(
            name="plan_quality",
            needs=_PLAN,
            metadata_fields=("task", "plan"),
            skip_without_plan=True,
            criteria=(
                "Score the quality of the extracted plan itself, whether or not it was followed: "
                "completeness for the task, logical order, efficiency, enough but not excessive "
                "detail, alignment with what the user wants. 1.0 excellent; 0.75 good with minor "
                "flaws; 0.5 adequate with notable gaps; 0.25 weak; 0.0 does not address the task."
            ),
        ),
    )
}

METRIC_NAMES = tuple(RUBRICS)


def metric_instructions(rubric: Rubric, facts: TraceFacts, examples: Mapping[str, str] | None = None) -> str:
    """A rubric's instructions, after its worked examples when it has some (`examples`:
    metric name -> the examples' text, see `prompts.examples_section`)."""
    own = rubric.instructions(facts)
    worked = (examples or {}).get(rubric.name)
    return f"{worked}\n\n{own}" if worked else own


def combined_instructions(
    rubrics: Sequence[Rubric], facts: TraceFacts, examples: Mapping[str, str] | None = None
) -> str:
    """All enabled rubrics in one call: one answer key per metric."""
    names = ", ".join(r.name for r in rubrics)
    sections = [
        (
            f"Evaluate each criterion below separately. Answer with one JSON object whose keys "
            f"are {names}; each value is the answer that criterion asks for."
        )
    ]
    sections.extend(f"## {r.name}\n{metric_instructions(r, facts, examples)}" for r in rubrics)
    return "\n\n".join(sections)


def combined_schema(rubrics: Sequence[Rubric], facts: TraceFacts) -> dict[str, Any]:
    return _object({r.name: r.schema(facts) for r in rubrics})
