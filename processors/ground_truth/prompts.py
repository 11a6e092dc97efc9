"""Judge prompts for ground-truth grading: the recorded run as a data block, then the question.

Like every judge prompt (`spanscore.processors.judge_metrics.prompts`), what the agent recorded
(user messages, tool arguments and results, responses) is untrusted: it sits inside
`<trace_data>`, redacted, truncated and with any delimiter defanged, and the system
message says it is never an instruction. What the dataset's author wrote (the task,
subgoals, checks, the ground-truth answer) is part of the instructions after the block;
it is defanged too, so a stray delimiter in a dataset cannot open or close the block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.judge_metrics.prompts import TRACE_CLOSE, TRACE_OPEN, PromptBuilder, neutralize

SUBGOAL_KEY = "subgoal_{index}"
EXPLANATION = {"type": "string"}
UNIT = {"type": "number", "minimum": 0.0, "maximum": 1.0}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Every property required and nothing else allowed, as strict structured outputs need.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _author_text(text: str) -> str:
    """Dataset text on one line, defanged."""
    return " ".join(neutralize(text).split())


# --- data blocks ------------------------------------------------------------------------


def transcript_block(builder: PromptBuilder, turns: Sequence[AgentTrace]) -> str:
    """The conversation so far: per turn the user message, what the agent said and which
    tools it called (arguments, results, errors) in order, and its response."""
    lines = [TRACE_OPEN]
    for number, turn in enumerate(turns, 1):
        lines.append(f"turn {number}:")
        lines.append(f"  user: {builder.field_text(turn.user_input)}")
        for step in turn.steps:
            if step.kind == "tool":
                lines.extend(builder.tool_call_lines(step, "  tool call", "    "))
            elif step.result and step.result.strip() != turn.final_output.strip():
                # What the agent said along the way; its final response follows below.
                lines.append(f"  agent (intermediate): {builder.field_text(step.result)}")
        lines.append(f"  agent: {builder.field_text(turn.final_output)}")
        if turn.error:
            lines.append(f"  agent error: {builder.field_text(turn.error)}")
    if not turns:
        lines.append("no turns")
    lines.append(TRACE_CLOSE)
    return "\n".join(lines)


def value_block(builder: PromptBuilder, actual: Any) -> str:
    return "\n".join([TRACE_OPEN, f"value: {builder.field_text(actual)}", TRACE_CLOSE])


def answer_block(builder: PromptBuilder, question: str, answer: str, tool_results: Sequence[str]) -> str:
    lines = [TRACE_OPEN, f"question: {builder.field_text(question)}"]
    if tool_results:
        lines.append("tool_results:")
        lines.extend(f"{i}. {builder.field_text(result)}" for i, result in enumerate(tool_results, 1))
    lines.append(f"final_answer: {builder.field_text(answer)}")
    lines.append(TRACE_CLOSE)
    return "\n".join(lines)


# --- subgoals ---------------------------------------------------------------------------

_SUBGOAL_RULES = (
    "The trace data above is a conversation between a user and an AI agent: each turn's "
    "user message, the tools the agent called with their arguments and results, and the "
    "agent's responses, in order.{task}\n"
    "Decide whether the agent has completed {what}, judging only by what the conversation "
    "shows. A subgoal is complete when the agent did it, or told the user what it asks "
    "for; a plan, a promise or an attempt that failed does not count. A subgoal that was "
    "completed earlier in the conversation stays complete."
)
_VERDICT = '{"explanation": "<one sentence>", "complete": true or false}'


def _task_line(task: str | None) -> str:
    return f"\nThe user's overall task: {_author_text(task)}" if task else ""


def subgoals_instructions(task: str | None, subgoals: Sequence[tuple[int, str]]) -> str:
    """One question for several subgoals, `(index, details)` each, answered per key."""
    keys = [SUBGOAL_KEY.format(index=index) for index, _ in subgoals]
    lines = [_SUBGOAL_RULES.format(task=_task_line(task), what="each subgoal below; decide each one separately")]
    lines.append("Subgoals:")
    lines.extend(f"- {key}: {_author_text(details)}" for key, (_, details) in zip(keys, subgoals))
    lines.append(f"Answer with a JSON object with the keys {', '.join(keys)}; each value is {_VERDICT}.")
    return "\n".join(lines)


def subgoal_instructions(task: str | None, details: str) -> str:
    return "\n".join(
        [
            _SUBGOAL_RULES.format(task=_task_line(task), what="the subgoal below"),
            f"Subgoal: {_author_text(details)}",
            f"Answer with a JSON object: {_VERDICT}.",
        ]
    )


VERDICT_SCHEMA = _object({"explanation": EXPLANATION, "complete": {"type": "boolean"}})


def subgoals_schema(indices: Sequence[int]) -> dict[str, Any]:
    return _object({SUBGOAL_KEY.format(index=index): VERDICT_SCHEMA for index in indices})


# --- checks -----------------------------------------------------------------------------


def check_instructions(check_text: str, what: str) -> str:
    return "\n".join(
        [
            f"The value in the trace data above is {_author_text(what)}, recorded from an AI agent's run.",
            f"Does it satisfy this check: {_author_text(check_text)}",
            (
                "Judge what the value means, not how it is formatted; when it does not clearly satisfy "
                "the check, it fails."
            ),
            'Answer with a JSON object: {"explanation": "<one sentence>", "passed": true or false}.',
        ]
    )


CHECK_SCHEMA = _object({"explanation": EXPLANATION, "passed": {"type": "boolean"}})


# --- answer correctness -----------------------------------------------------------------


def answer_instructions(expected: str, with_tools: bool) -> str:
    expected_text = neutralize(expected).strip().replace("\n", "\n  ")
    lines = [
        "The trace data above holds a question put to an AI agent and the agent's final answer"
        + (", with the results of the tools it called." if with_tools else "."),
        f"The ground-truth answer to the question is:\n  {expected_text}",
        (
            "correctness_score: how correct the agent's final answer is against the ground-truth "
            "answer, from 0.0 to 1.0. 1.0 when it gives the same facts (wording and extra helpful "
            "detail do not matter); lower for missing or imprecise parts; 0.0 when it contradicts "
            "the ground truth, misses it entirely or gives no answer."
        ),
    ]
    if with_tools:
        lines.append(
            "uses_tool_results: true when the final answer uses the information the "
            "tool results returned; false when it ignores or contradicts them."
        )
        answer = '{"reasoning": "<one or two sentences>", "correctness_score": <number>, "uses_tool_results": <bool>}'
    else:
        answer = '{"reasoning": "<one or two sentences>", "correctness_score": <number>}'
    lines.append(f"Answer with a JSON object: {answer}.")
    return "\n".join(lines)


def answer_schema(with_tools: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {"reasoning": EXPLANATION, "correctness_score": UNIT}
    if with_tools:
        properties["uses_tool_results"] = {"type": "boolean"}
    return _object(properties)
