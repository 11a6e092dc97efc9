"""One attempt at a case: which case a session is graded against, and what it did so far.

An attempt is one session (a trace without a session is a one-turn attempt); its turns
are its traces in the order they were scored. The case is found once, from the first
trace that names it: the case key (`eval.case.id` by default) on the root span, any other
span, or the resource — `OTEL_RESOURCE_ATTRIBUTES=eval.case.id=...` on the agent is
enough — else the session's first user message equal to a case's first message
(`expected_output.join`, the join every component reading a suite's cases makes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.agent_trace.content import parse_json
from spanscore.processors.eval_dataset import Case
from spanscore.processors.metrics.expected_calls import ActualCall


@dataclass
class AttemptState:
    """What the processor keeps per session between its turns (in `session.state`)."""

    case: Case | None
    joined_by: str | None
    turns: list[AgentTrace] = field(default_factory=list)
    completed: set[int] = field(default_factory=set)  # subgoal indices, once complete always complete
    progress: list[float] = field(default_factory=list)  # after each evaluated turn
    incomplete_reasons: dict[int, str] = field(default_factory=dict)  # the judge's last word per subgoal
    answers: list[tuple[int, bool]] = field(default_factory=list)  # (turn, correct) per graded interaction
    tool_usage: list[tuple[int, bool]] = field(default_factory=list)  # (turn, passed) per turn expecting calls
    errors: list[str] = field(default_factory=list)  # answers and checks that could not be graded
    progress_error: str | None = None  # the first reason subgoals could not be judged
    # Answers and checks not graded because the judge's hourly budget was spent: skipped, not failed.
    skipped: list[str] = field(default_factory=list)
    progress_skipped: str | None = None  # the first turn whose subgoals the budget left unjudged

    @property
    def all_errors(self) -> list[str]:
        """Everything `success` could not grade."""
        return self.errors + ([self.progress_error] if self.progress_error else [])

    @property
    def all_skipped(self) -> list[str]:
        """Everything the judge's budget kept from being graded."""
        return self.skipped + ([self.progress_skipped] if self.progress_skipped else [])

    def actual_calls(self) -> list[ActualCall]:
        calls = []
        for turn, agent in enumerate(self.turns):
            for step in agent.tool_steps:
                arguments = step.arguments if isinstance(step.arguments, dict) else {}
                calls.append(ActualCall(turn=turn, name=step.name, arguments=arguments, output=_output(step.result)))
        return calls


def _output(result: str | None) -> Any:
    """A tool's recorded result as a JSON value when it is JSON text, else the text."""
    return parse_json(result) if result is not None else None
