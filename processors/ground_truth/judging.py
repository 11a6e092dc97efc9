"""The judge questions of ground-truth grading: subgoal progress, checks, answer correctness.

`GroundTruthJudge` asks an LLM judge the three kinds of question the eval suites need
(the suite arithmetic in docs/eval-suites.md gives the metrics built on them):

- `subgoal_verdicts`: agent_inspect's dynamic-conversation judging. Is each pending
  subgoal complete, given the transcript of the turns so far? Batched (the default),
  one request per trial asks about every pending subgoal at once, each under its own
  answer key; unbatched, each subgoal is its own request per trial. With early stop,
  trials after the first wave ask only about the subgoals whose majority is still open.
- `check`: a yes/no on an actual value (a tool argument or output) against a dataset's
  check text.
- `answer_correctness`: fair-forge's correctness_score of the final answer against the
  ground-truth answer and, in the same call, whether the answer uses the tool results.

Trials: an odd count; yes/no decisions take the majority of the valid answers, scores the
median (as the judge metrics do). Early stop is agent_inspect's `optimize_judge_trials`,
as `run_trials` implements it: `N // 2 + 1` trials first, then only as many as could still
change an open majority. An answer that does not fit its schema is retried by the judge
client itself (its retry on malformed answers); a decision with no valid vote, or tied
votes, after all trials raises JudgeError, for the caller to record as an error. For
utilization alone a tie counts as "not used" (the cautious side, as tied verdicts do in
the judge metrics), so that it does not discard a valid correctness score.

Usage: `calls` counts HTTP requests actually sent (retries and failed requests included,
cache hits excluded), `input_tokens` and `output_tokens` what the judge reported, summed
over every question asked through this object, as the judge metrics' planner counts.

Threading: one event loop; the methods may be awaited concurrently on it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spanscore.core.redaction import Redaction
from spanscore.processors.agent_trace import AgentTrace
from spanscore.processors.eval_dataset import Case
from spanscore.processors.ground_truth.prompts import (
    CHECK_SCHEMA,
    SUBGOAL_KEY,
    VERDICT_SCHEMA,
    answer_block,
    answer_instructions,
    answer_schema,
    check_instructions,
    subgoal_instructions,
    subgoals_instructions,
    subgoals_schema,
    transcript_block,
    value_block,
)
from spanscore.processors.judge_metrics.base import Judge, JudgeError
from spanscore.processors.judge_metrics.planner import Usage
from spanscore.processors.judge_metrics.prompts import DEFAULT_MAX_FIELD_CHARS, PromptBuilder
from spanscore.processors.judge_metrics.trials import (
    TrialRun,
    closest_to,
    is_unit_score,
    median,
    run_trials,
    validate_trials,
)

MALFORMED = "malformed_answer"
NO_MAJORITY = "no_majority"
SUBGOALS_SCHEMA_NAME = "subgoals"
SUBGOAL_SCHEMA_NAME = "subgoal"
CHECK_SCHEMA_NAME = "check"
ANSWER_SCHEMA_NAME = "answer_correctness"


@dataclass(frozen=True)
class SubgoalVerdict:
    """Whether a subgoal is complete; `votes` = (complete, incomplete) valid trial answers."""

    complete: bool
    explanation: str
    votes: tuple[int, int]


@dataclass(frozen=True)
class CheckVerdict:
    passed: bool
    explanation: str


@dataclass(frozen=True)
class AnswerVerdict:
    """`score`: median correctness_score in [0, 1]; `utilization`: 1.0 when the final answer
    uses the tool results, 0.0 when not, None when there were no tool results."""

    score: float
    utilization: float | None
    reasoning: str


Ballot = tuple[bool, str]  # one valid answer on one decision: (side, explanation)


class GroundTruthJudge:
    """Asks `judge` the ground-truth questions (see the module docstring).

    `redaction`: a `Redaction` or the `{patterns, keys}` setting, applied to every
    recorded value before it reaches a prompt; `max_field_chars`: longer values are cut.
    """

    def __init__(
        self,
        judge: Judge,
        trials: int = 5,
        early_stop: bool = True,
        batched: bool = True,
        redaction: Redaction | Mapping[str, Any] | None = None,
        max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
    ):
        validate_trials(trials)
        self.judge = judge
        self.trials = trials
        self.early_stop = early_stop
        self.batched = batched
        self.builder = PromptBuilder(Redaction.from_config(redaction), max_field_chars)
        self.spent = Usage()  # what the judge was asked so far, in HTTP requests and tokens

    def usage(self) -> dict[str, int]:
        return self.spent.as_dict()

    async def _ask(
        self, data_block: str, instructions: str, schema: dict[str, Any], schema_name: str, trial: int
    ) -> dict[str, Any]:
        messages = self.builder.messages(data_block, instructions, trial=trial)
        try:
            reply = await self.judge.complete(messages, schema, schema_name)
        except JudgeError as exc:
            self.spent.add_failed(exc)
            raise
        self.spent.add(reply)
        return reply.data

    # -- subgoals ------------------------------------------------------------------------
    async def subgoal_verdicts(
        self, case: Case, turns: Sequence[AgentTrace], pending: Sequence[int]
    ) -> dict[int, SubgoalVerdict]:
        """A verdict for each pending subgoal (indices into `case.subgoals`) on the
        transcript of `turns`; JudgeError when any of them gets no majority."""
        indices = list(dict.fromkeys(pending))
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(case.subgoals):
                raise ValueError(
                    f"pending: {index!r} is not a subgoal index of case {case.id!r} ({len(case.subgoals)} subgoals)"
                )
        if not indices:
            return {}
        calls_before = self.spent.calls
        data = transcript_block(self.builder, turns)
        if self.batched:
            ballots, errors = await self._subgoals_batched(case, data, indices)
        else:
            runs = await asyncio.gather(*(self._subgoal_single(case, data, index) for index in indices))
            ballots = {index: votes for index, (votes, _) in zip(indices, runs)}
            errors = {index: errs for index, (_, errs) in zip(indices, runs)}
        verdicts = {}
        for index in indices:
            side, explanation, tally = _decide(
                ballots[index], errors[index], f"subgoal {index}", self.trials, self.spent.calls - calls_before
            )
            verdicts[index] = SubgoalVerdict(complete=side, explanation=explanation, votes=tally)
        return verdicts

    async def _subgoals_batched(
        self, case: Case, data: str, indices: list[int]
    ) -> tuple[dict[int, list[Ballot]], dict[int, list[JudgeError]]]:
        need = self.trials // 2 + 1
        # Ballots per trial, filled in between waves (run_trials reads the votes of all
        # answers after each wave), so every request of a wave asks about the same subgoals.
        seen: dict[int, dict[int, Ballot]] = {}

        def still_open() -> list[int]:
            if not self.early_stop:
                return indices
            tallies = {index: Counter(b[index][0] for b in seen.values() if index in b) for index in indices}
            return [index for index in indices if max(tallies[index][True], tallies[index][False]) < need]

        async def ask(trial: int) -> dict[str, Any]:
            asked = still_open() or indices
            pairs = [(index, case.subgoals[index].details) for index in asked]
            answer = await self._ask(
                data,
                subgoals_instructions(case.user_instruction, pairs),
                subgoals_schema(asked),
                SUBGOALS_SCHEMA_NAME,
                trial,
            )
            return {"trial": trial, "asked": asked, "answer": answer}

        def parse(asked_answer: dict[str, Any]) -> dict[int, Ballot]:
            answer = asked_answer["answer"]
            ballot = {}
            for index in asked_answer["asked"]:
                vote = _verdict(
                    answer.get(SUBGOAL_KEY.format(index=index)) if isinstance(answer, Mapping) else None, "complete"
                )
                if vote is not None:
                    ballot[index] = vote
            return ballot

        def votes(asked_answer: dict[str, Any]) -> dict[str, bool]:
            ballot = seen.setdefault(asked_answer["trial"], parse(asked_answer))
            return {str(index): side for index, (side, _) in ballot.items()}

        run = await run_trials(ask, self.trials, votes=votes, early_stop=self.early_stop)
        ballots: dict[int, list[Ballot]] = {index: [] for index in indices}
        errors: dict[int, list[JudgeError]] = {index: list(run.errors) for index in indices}
        for asked_answer in run.answers:
            ballot = parse(asked_answer)
            for index in asked_answer["asked"]:
                if index in ballot:
                    ballots[index].append(ballot[index])
                else:
                    errors[index].append(JudgeError(f"subgoal {index}: no valid verdict in the answer", MALFORMED))
        return ballots, errors

    async def _subgoal_single(self, case: Case, data: str, index: int) -> tuple[list[Ballot], list[JudgeError]]:
        instructions = subgoal_instructions(case.user_instruction, case.subgoals[index].details)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(data, instructions, VERDICT_SCHEMA, SUBGOAL_SCHEMA_NAME, trial)

        return await self._yes_no_trials(ask, "complete")

    async def _yes_no_trials(self, ask, key: str) -> tuple[list[Ballot], list[JudgeError]]:
        """Trials of one yes/no decision read from `answer[key]`: valid ballots, errors."""

        def votes(answer: dict[str, Any]) -> dict[str, bool]:
            vote = _verdict(answer, key)
            return {} if vote is None else {key: vote[0]}

        run = await run_trials(ask, self.trials, votes=votes, early_stop=self.early_stop)
        ballots, errors = [], list(run.errors)
        for answer in run.answers:
            vote = _verdict(answer, key)
            if vote is None:
                errors.append(JudgeError(f"no valid {key!r} verdict in the answer", MALFORMED))
            else:
                ballots.append(vote)
        return ballots, errors

    # -- checks --------------------------------------------------------------------------
    async def check(self, check_text: str, actual: Any, what: str) -> CheckVerdict:
        """Whether `actual` (e.g. a tool argument) satisfies `check_text`; `what` names it
        in the prompt ("argument city of tool weather")."""
        calls_before = self.spent.calls
        data = value_block(self.builder, actual)
        instructions = check_instructions(check_text, what)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(data, instructions, CHECK_SCHEMA, CHECK_SCHEMA_NAME, trial)

        ballots, errors = await self._yes_no_trials(ask, "passed")
        passed, explanation, _ = _decide(
            ballots, errors, f"check on {what}", self.trials, self.spent.calls - calls_before
        )
        return CheckVerdict(passed=passed, explanation=explanation)

    # -- answer correctness --------------------------------------------------------------
    async def answer_correctness(
        self, question: str, expected: str, answer: str, tool_results: Sequence[str], *, threshold: float | None = None
    ) -> AnswerVerdict:
        """The final `answer` graded against the ground-truth `expected`, and whether it uses
        `tool_results`. Early stop needs the pass `threshold` the caller applies to the
        score (the decision the trials vote on); without it every trial runs."""
        with_tools = bool(tool_results)
        calls_before = self.spent.calls
        data = answer_block(self.builder, question, answer, list(tool_results))
        instructions, schema = answer_instructions(expected, with_tools), answer_schema(with_tools)

        async def ask(trial: int) -> dict[str, Any]:
            return await self._ask(data, instructions, schema, ANSWER_SCHEMA_NAME, trial)

        def votes(answer: dict[str, Any]) -> dict[str, bool]:
            parsed = _answer(answer, with_tools)
            if parsed is None or threshold is None:
                return {}
            score, uses, _ = parsed
            ballot = {"correct": score >= threshold}
            if uses is not None:
                ballot["utilization"] = uses
            return ballot

        run = await run_trials(
            ask, self.trials, votes=votes if threshold is not None else None, early_stop=self.early_stop
        )
        parsed = [p for p in (_answer(a, with_tools) for a in run.answers) if p is not None]
        if not parsed:
            raise _no_answer("answer correctness", run, self.spent.calls - calls_before)
        scores = [score for score, _, _ in parsed]
        score = median(scores)
        reasoning = parsed[closest_to(scores, score)][2]
        utilization = None
        if with_tools:
            uses = Counter(u for _, u, _ in parsed)
            utilization = 1.0 if uses[True] > uses[False] else 0.0
        return AnswerVerdict(score=score, utilization=utilization, reasoning=reasoning)


def _verdict(answer: Any, key: str) -> Ballot | None:
    """(side, explanation) from `{key: bool, "explanation": str}`, None when not valid."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get(key), bool):
        return None
    explanation = answer.get("explanation")
    return answer[key], explanation.strip() if isinstance(explanation, str) else ""


def _answer(answer: Any, with_tools: bool) -> tuple[float, bool | None, str] | None:
    if not isinstance(answer, Mapping) or not is_unit_score(answer.get("correctness_score")):
        return None
    uses = answer.get("uses_tool_results") if with_tools else None
    if with_tools and not isinstance(uses, bool):
        return None
    reasoning = answer.get("reasoning")
    return float(answer["correctness_score"]), uses, reasoning.strip() if isinstance(reasoning, str) else ""


def _decide(
    ballots: Sequence[Ballot], errors: Sequence[JudgeError], what: str, trials: int, calls: int
) -> tuple[bool, str, tuple[int, int]]:
    """The majority side, the explanation of the first ballot on it, and (yes, no) votes."""
    yes = sum(side for side, _ in ballots)
    no = len(ballots) - yes
    if yes == no:
        failed = f", {len(errors)} failed" if errors else ""
        reason = f"; last error: {errors[-1]}" if errors else ""
        raise JudgeError(
            f"{what}: no majority after {trials} trials ({yes} yes, {no} no{failed}){reason}",
            errors[-1].error_type if errors else NO_MAJORITY,
            calls=calls,
        )
    side = yes > no
    explanation = next(text for vote, text in ballots if vote == side)
    return side, explanation, (yes, no)


def _no_answer(what: str, run: TrialRun, calls: int) -> JudgeError:
    if run.errors:
        last = run.errors[-1]
        return JudgeError(
            f"{what}: no valid answer in {run.run} trials; last error: {last}", last.error_type, calls=calls
        )
    return JudgeError(f"{what}: no valid answer in {run.run} trials", MALFORMED, calls=calls)


__all__ = ["AnswerVerdict", "CheckVerdict", "GroundTruthJudge", "SubgoalVerdict"]
