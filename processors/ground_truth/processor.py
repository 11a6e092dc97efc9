"""`ground_truth` processor: attempts graded against an eval suite's cases.

Each session (a trace without a session: a one-turn attempt) is joined to a case of the
dataset (see `attempt`) and scored against its ground truth, as the suite arithmetic in
docs/eval-suites.md defines the metrics:

- per turn, on the turn's root span: `answer_correctness` (fair-forge's judge, correct at
  `answer_threshold`) where the case scripts an `expected_response` for that turn, and
  `tool_usage` (fair-forge's four aspects, weighted) where it expects tool calls then;
  its utilization is the judge's view from grading that answer, else the values of the
  tool results found in the answer (`result_values`);
- per attempt, on the session's `evaluate_session` carrier (the root span of a one-turn
  attempt): `progress`, `progress_auc`, `progress_per_turn`, `success_final_turn`
  (agent_inspect, subgoals judged turn by turn, a completed subgoal never asked about
  again, all pending subgoals of a turn in one request in `batched` mode),
  `tool_call_accuracy` (expected calls matched; `value` exact, `check` judged),
  `conversation_correctness` (correct interactions / interactions, passing only when all
  are; pass@k and pass^k per interaction in its metadata), and `success`: every
  ground-truth check the case defines passed, with `require_tools` the tool usage of
  every turn that expects calls too.

Every scored span also gets `eval.case.id`. Traces that join no case are left to the other
processors; how many attempts joined, and how, is logged at shutdown. Without a judge the
checks that need one (subgoals, `check` items, expected answers) record an error saying so.
Past the judge's `budget` they are skipped, as the judge metrics are: no result, only
`eval.<metric>.skipped` saying why; so is `success` then, unless a graded check already
failed (0) or one could not be graded for another reason (an error).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections import Counter
from typing import Any

from pydantic import Field, field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import CODE, Provenance, revision_of
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.score_encoding import CASE_ID, result_keys
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.core.wording import counted
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from spanscore.processors.base import Processor, SessionOutput, TraceOutput
from spanscore.processors.eval_dataset import Case, Dataset
from spanscore.processors.expected_output import (
    DEFAULT_CASE_KEY,
    CaseKey,
    DatasetFile,
    DatasetSetting,
    case_id_of,
    join,
)
from spanscore.processors.ground_truth import prompts
from spanscore.processors.ground_truth.attempt import AttemptState
from spanscore.processors.ground_truth.judging import AnswerVerdict, GroundTruthJudge
from spanscore.processors.ground_truth.result_values import ToolOutcome, answer_utilization, known_text
from spanscore.processors.judge_metrics.base import Judge, JudgeError
from spanscore.processors.judge_metrics.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge_metrics.config import (
    JudgeSection,
    JudgeTrials,
    build_judge,
    judge_configured,
)
from spanscore.processors.metrics.expected_calls import as_expected_call, match_expected_calls, tool_call_accuracy
from spanscore.processors.metrics.pass_at_k import pass_at_k, pass_pow_k
from spanscore.processors.metrics.progress import (
    DEFAULT_MAX_TURNS,
    pad_progress,
    progress_auc,
    progress_per_turn,
    success_final_turn,
)
from spanscore.processors.metrics.tool_usage import (
    DEFAULT_TOOL_WEIGHTS,
    tool_parameters,
    tool_selection,
    tool_sequence,
    tool_usage_overall,
)

log = logging.getLogger("spanscore.ground_truth")

CASE_ATTRIBUTE = CASE_ID
DEFAULT_ANSWER_THRESHOLD = 0.7
DEFAULT_TOOL_THRESHOLD = 1.0
EVALUATOR = "judge"
NO_JUDGE = "needs a judge; configure ground_truth.judge (api_key or base_url)"
TURN_METRICS = ("answer_correctness", "tool_usage")
PROGRESS_METRICS = ("progress", "progress_auc", "progress_per_turn", "success_final_turn")
ATTEMPT_METRICS = (*PROGRESS_METRICS, "tool_call_accuracy", "conversation_correctness", "success")


class GroundTruthConfig(ComponentConfig):
    dataset: DatasetSetting  # YAML or JSON Lines, see `eval_dataset`
    case_key: CaseKey = DEFAULT_CASE_KEY
    judge: JudgeSection = None
    trials: JudgeTrials = 5
    early_stop: bool = True
    batched: bool = True
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, ge=1)
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    answer_threshold: float = Field(default=DEFAULT_ANSWER_THRESHOLD, ge=0.0, le=1.0)
    tool_threshold: float = Field(default=DEFAULT_TOOL_THRESHOLD, ge=0.0, le=1.0)
    require_tools: bool = True  # an interaction is correct only when its tool usage is too
    k: list[int] = Field(default_factory=lambda: [1, 3])

    @field_validator("k")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError("every k must be >= 1")
        return sorted(set(value))

    @property
    def loaded(self) -> Dataset:
        assert isinstance(self.dataset, DatasetFile)
        return self.dataset.loaded

    @property
    def configured(self) -> bool:
        return judge_configured(self.judge)

    def not_run(self, component_id: str) -> str | None:
        cases = self.loaded.cases
        judged = [case for case in cases if case.judged_checks]
        if self.configured or not judged:
            return None
        kinds = ", ".join(dict.fromkeys(kind for case in judged for kind in case.judged_checks))
        return (
            f"{component_id}: {len(judged)} of {counted(len(cases), 'case')} need a judge ({kinds}), so their "
            f"attempts are left ungraded; set OPENAI_API_KEY (and OPENAI_BASE_URL, SPANSCORE_JUDGE_MODEL) "
            f"or give {component_id} a judge with api_key or base_url"
        )


class GroundTruth(Processor):
    def __init__(self, component_id: str, config: GroundTruthConfig):
        self.id = component_id
        self.config = config
        self.dataset = config.loaded
        self.metric_names = TURN_METRICS + ATTEMPT_METRICS
        self.judging: GroundTruthJudge | None = None
        self.joins: Counter[str] = Counter()

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return ATTEMPT_METRICS  # per turn: answer_correctness and tool_usage

    @property
    def uses_sessions(self) -> bool:
        return True

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if judge_configured(self.config.judge):
            self.judging = GroundTruthJudge(
                build_judge(self.config.judge),
                trials=self.config.trials,
                early_stop=self.config.early_stop,
                batched=self.config.batched,
            )
        log.info(
            "%s: %d cases from %s; judge: %s",
            self.id,
            len(self.dataset.cases),
            self.config.dataset,
            self.judging.judge.model if self.judging else "none (subgoals, checks and answers are not graded)",
        )

    def judges(self) -> tuple[Judge, ...]:
        return () if self.judging is None else (self.judging.judge,)

    def provenance(self, metric_name: str) -> Provenance:
        # The cases are the rubric here: a changed dataset is a new revision.
        # tool_usage too: the judge's view of the answer decides its utilization.
        judged = self.judging is not None
        settings = self.config.model_dump(exclude={"judge", "dataset"})
        return Provenance(
            self.judging.judge.model if self.judging is not None else CODE,
            revision_of(
                metric_name,
                self.config.loaded.model_dump(mode="json"),
                settings,
                inspect.getsource(prompts) if judged else None,
            ),
            judged=judged,
        )

    async def shutdown(self, deadline: float) -> None:
        judging, self.judging = self.judging, None
        if judging is not None:
            await judging.judge.close()
        if self.joins:
            log.info(
                "%s: attempts joined to a case: %s",
                self.id,
                ", ".join(f"{count} by {how}" for how, count in sorted(self.joins.items())),
            )

    # -- per turn ----------------------------------------------------------------------

    async def process_trace(self, trace: Trace, session: Session | None) -> list[TraceOutput]:
        agent = agent_trace_of(trace)
        attempt = session.state.get(self.id) if session is not None else None
        if attempt is None:
            case, how, problem = join(self.dataset, case_id_of(trace, self.config.case_key), agent.user_input)
            if problem:
                log.warning("%s: trace %s: %s", self.id, trace.trace_id_hex, problem)
            attempt = AttemptState(case=case, joined_by=how)
            self.joins[how or "nothing (not graded)"] += 1
            if session is not None:
                session.state[self.id] = attempt
        case = attempt.case
        if case is None:
            return []
        turn = len(attempt.turns)
        attempt.turns.append(agent)
        calls_before = self.judging.spent.calls if self.judging else 0
        outputs: list[TraceOutput] = [SpanAttribute(CASE_ATTRIBUTE, case.id)]
        outputs += await self._turn_results(attempt, case, turn, agent)
        await self._judge_progress(attempt, case, turn)
        if session is None:  # a one-turn attempt: its attempt results go on this trace
            outputs += await self._attempt_results(attempt, case)
        if self.judging and self.judging.spent.calls > calls_before:
            outputs.append(EvaluatorUsage(EVALUATOR, self.judging.spent.calls - calls_before))
        return outputs

    async def _turn_results(
        self, attempt: AttemptState, case: Case, turn: int, agent: AgentTrace
    ) -> list[MetricResult | SpanAttribute]:
        results = []
        expected = case.turns[turn].expected_response if turn < len(case.turns) else None
        # The answer first: its verdict says, in the same call, whether the answer uses the
        # tool results, which tool usage takes; tool usage then decides the answer's correctness.
        answer = await self._judge_answer(attempt, turn, agent, expected) if expected is not None else None
        verdict = answer if isinstance(answer, AnswerVerdict) else None
        usage = self._tool_usage(case, turn, agent, verdict.utilization if verdict else None)
        if usage is not None:
            results.append(usage)
            attempt.tool_usage.append((turn, bool(usage.passed)))
        if verdict is not None and expected is not None:  # a verdict is given on what was expected
            results.append(self._answer(attempt, turn, expected, verdict, usage))
        elif answer is not None:
            results.append(answer)
        return results

    def _tool_usage(
        self, case: Case, turn: int, agent: AgentTrace, judged_utilization: float | None
    ) -> MetricResult | None:
        expected = [c for c in case.expected_tool_calls if c.turn == turn or (c.turn is None and len(case.turns) <= 1)]
        if not expected:
            return None
        # `check` parameters need a judge: they are graded in tool_call_accuracy, and left
        # out of this deterministic comparison on both sides.
        judged = {p.name for c in expected for p in c.parameters if p.kind == "check"}
        used = [
            (
                s.name,
                {k: v for k, v in (s.arguments if isinstance(s.arguments, dict) else {}).items() if k not in judged},
            )
            for s in agent.tool_steps
        ]
        wanted = [(c.tool, {p.name: p.value for p in c.parameters if p.kind == "value"}) for c in expected]
        if judged_utilization is not None:
            utilization, source, why = judged_utilization, "judge", "judge"
        else:
            found = answer_utilization(
                agent.final_output,
                [ToolOutcome(s.result, known_text(agent.user_input, s.arguments)) for s in agent.tool_steps],
            )
            utilization, source, why = found.score, "values", found.reason
        aspects = {
            "selection": tool_selection([n for n, _ in used], [n for n, _ in wanted]),
            "parameters": tool_parameters(used, wanted),
            "sequence": tool_sequence(used, wanted, order_matters=case.tool_sequence_matters),
            "utilization": utilization,
        }
        overall = tool_usage_overall(*aspects.values(), weights=DEFAULT_TOOL_WEIGHTS)
        explanation = ", ".join(f"{name} {value:.2f}" for name, value in aspects.items())
        return MetricResult(
            name="tool_usage",
            score=overall,
            threshold=self.config.tool_threshold,
            explanation=f"Tool usage {overall:.2f} (turn {turn}): {explanation} ({why}).",
            metadata={**aspects, "utilization_by": source},
        )

    async def _judge_answer(
        self, attempt: AttemptState, turn: int, agent: AgentTrace, expected: str
    ) -> AnswerVerdict | MetricResult | SpanAttribute:
        """The judge's verdict on the turn's answer, or what to record instead of a grade."""
        threshold = self.config.answer_threshold
        if self.judging is None:
            attempt.errors.append(f"turn {turn} answer not graded: {NO_JUDGE}")
            return MetricResult.failure("answer_correctness", NO_JUDGE, threshold)
        try:
            return await self.judging.answer_correctness(
                agent.user_input,
                expected,
                agent.final_output,
                [s.result for s in agent.tool_steps if s.result],
                threshold=threshold,
            )
        except JudgeError as exc:
            if _over_budget(exc):
                attempt.skipped.append(f"turn {turn} answer not graded: {exc}")
                return _skipped("answer_correctness", exc)
            attempt.errors.append(f"turn {turn} answer not graded: {exc}")
            return MetricResult.failure("answer_correctness", exc, threshold)

    def _answer(
        self, attempt: AttemptState, turn: int, expected: str, verdict: AnswerVerdict, usage: MetricResult | None
    ) -> MetricResult:
        threshold = self.config.answer_threshold
        tools_ok = usage is None or not self.config.require_tools or (usage.score or 0.0) >= self.config.tool_threshold
        correct = verdict.score >= threshold and tools_ok
        attempt.answers.append((turn, correct))
        why = (
            "" if tools_ok or usage is None else f"; tool usage {usage.score:.2f} is below {self.config.tool_threshold}"
        )
        return MetricResult(
            name="answer_correctness",
            score=verdict.score,
            threshold=threshold,
            explanation=f"Turn {turn}: {verdict.reasoning}{why}",
            metadata={"correct": correct, "utilization": verdict.utilization, "expected": expected},
        )

    async def _judge_progress(self, attempt: AttemptState, case: Case, turn: int) -> None:
        if not case.subgoals or turn >= self.config.max_turns:
            return
        # Dynamic subgoals until complete; a subgoal pinned to a turn only at that turn.
        pending = [
            i
            for i, goal in enumerate(case.subgoals)
            if i not in attempt.completed and (goal.turn is None or goal.turn == turn)
        ]
        if pending and self.judging is None:
            attempt.progress_error = attempt.progress_error or f"subgoals not judged: {NO_JUDGE}"
        elif pending and self.judging is not None:
            try:
                verdicts = await self.judging.subgoal_verdicts(case, attempt.turns, pending)
            except JudgeError as exc:
                why = f"subgoals at turn {turn} not judged: {exc}"
                if _over_budget(exc):
                    attempt.progress_skipped = attempt.progress_skipped or why
                else:
                    attempt.progress_error = attempt.progress_error or why
                verdicts = {}
            for index, verdict in verdicts.items():
                if verdict.complete:
                    attempt.completed.add(index)
                    attempt.incomplete_reasons.pop(index, None)
                else:
                    attempt.incomplete_reasons[index] = verdict.explanation
        attempt.progress.append(len(attempt.completed) / len(case.subgoals))

    # -- per attempt -------------------------------------------------------------------

    async def process_session(self, session: Session) -> list[SessionOutput]:
        attempt = session.state.get(self.id)
        case = attempt.case if attempt is not None else None
        if attempt is None or case is None:
            return []
        calls_before = self.judging.spent.calls if self.judging else 0
        outputs: list[SessionOutput] = [
            SpanAttribute(CASE_ATTRIBUTE, case.id),
            *await self._attempt_results(attempt, case),
        ]
        if self.judging and self.judging.spent.calls > calls_before:  # the tool-call checks
            outputs.append(EvaluatorUsage(EVALUATOR, self.judging.spent.calls - calls_before))
        return outputs

    async def _attempt_results(self, attempt: AttemptState, case: Case) -> list[MetricResult | SpanAttribute]:
        results = []
        checks: list[tuple[str, bool]] = []  # what `success` requires, and whether it held
        threshold = self.config.threshold
        if case.subgoals:
            if attempt.progress_error is None and attempt.progress_skipped is not None:
                results += [_skipped(name, attempt.progress_skipped) for name in PROGRESS_METRICS]
            elif attempt.progress and attempt.progress_error is None:
                padded = pad_progress(attempt.progress, self.config.max_turns)
                final = padded[-1]
                incomplete = "; ".join(
                    f"{case.subgoals[i].details!r}: {why}" for i, why in sorted(attempt.incomplete_reasons.items())
                )
                by_turn = ", ".join(f"{p:.2f}" for p in attempt.progress)
                detail = f"Progress by turn: {by_turn}." + (f" Incomplete: {incomplete}." if incomplete else "")
                metadata = {"progress_by_turn": attempt.progress, "completed": sorted(attempt.completed)}
                results += [
                    MetricResult(
                        name="progress", score=final, threshold=threshold, explanation=detail, metadata=metadata
                    ),
                    MetricResult(
                        name="progress_auc", score=progress_auc(padded), threshold=threshold, explanation=detail
                    ),
                    MetricResult(
                        name="progress_per_turn",
                        score=progress_per_turn(padded),
                        threshold=threshold,
                        explanation=detail,
                    ),
                    MetricResult(
                        name="success_final_turn", score=success_final_turn(padded), threshold=1.0, explanation=detail
                    ),
                ]
                checks.append(("every subgoal complete", final == 1.0))
            else:
                reason = attempt.progress_error or "no turn was evaluated"
                results += [MetricResult.failure(name, reason, threshold) for name in PROGRESS_METRICS]
        if case.expected_tool_calls:
            accuracy, matched = await self._tool_call_accuracy(attempt, case)
            results.append(accuracy)
            if matched is not None:
                checks.append(("every expected tool call made", matched))
        if attempt.tool_usage and self.config.require_tools:
            checks.append(("every turn's tool usage at tool_threshold", all(ok for _, ok in attempt.tool_usage)))
        if attempt.answers:
            correct = sum(ok for _, ok in attempt.answers)
            n = len(attempt.answers)
            metadata = {f"pass@{k}": pass_at_k(n, correct, k) for k in self.config.k}
            metadata.update({f"pass^{k}": pass_pow_k(n, correct, k) for k in self.config.k})
            wrong = [turn for turn, ok in attempt.answers if not ok]
            rates = ", ".join(f"{name} {value:.2f}" for name, value in metadata.items())
            results.append(
                MetricResult(
                    name="conversation_correctness",
                    score=correct / n,
                    threshold=1.0,
                    explanation=f"{correct} of {n} graded answers correct"
                    + (f"; wrong at turns {wrong}" if wrong else "")
                    + f" ({rates})",
                    metadata=metadata,
                )
            )
            checks.append(("every graded answer correct", correct == n))
        results.append(self._success(attempt, checks))
        return results

    async def _tool_call_accuracy(
        self, attempt: AttemptState, case: Case
    ) -> tuple[MetricResult | SpanAttribute, bool | None]:
        expected = [as_expected_call(c.model_dump(exclude_unset=True)) for c in case.expected_tool_calls]
        actual = attempt.actual_calls()
        try:
            verdicts = await self._check_verdicts(expected, actual)
        except JudgeError as exc:
            if _over_budget(exc):
                attempt.skipped.append(f"tool-call checks not judged: {exc}")
                return _skipped("tool_call_accuracy", exc), None
            attempt.errors.append(f"tool-call checks not judged: {exc}")
            return MetricResult.failure("tool_call_accuracy", exc), None
        except LookupError as exc:
            attempt.errors.append(str(exc))
            return MetricResult.failure("tool_call_accuracy", str(exc)), None
        matches = match_expected_calls(expected, actual, check=lambda text, value: verdicts[(text, _key(value))])
        score = tool_call_accuracy(matches)
        missed = [f"{c.tool}: {m.reason}" for c, m in zip(expected, matches) if not m.matched]
        explanation = f"{sum(m.matched for m in matches)} of {len(matches)} expected tool calls made"
        if missed:
            explanation += "; missed " + "; ".join(missed)
        return (
            MetricResult(name="tool_call_accuracy", score=score, threshold=1.0, explanation=explanation),
            not missed,
        )

    async def _check_verdicts(self, expected, actual) -> dict[tuple[str, str], bool]:
        """Every `check` the matching could ask, decided by the judge once per distinct value."""
        needed: dict[tuple[str, str], tuple[str, Any, str]] = {}
        for call in expected:
            candidates = [a for a in actual if a.name.strip() == call.tool and call.turn in (None, a.turn)]
            for candidate in candidates:
                for parameter in call.parameters:
                    if parameter.check is not None and parameter.name in candidate.arguments:
                        value = candidate.arguments[parameter.name]
                        needed[(parameter.check, _key(value))] = (
                            parameter.check,
                            value,
                            f"argument {parameter.name} of tool {call.tool}",
                        )
                if call.output is not None and call.output.check is not None:
                    needed[(call.output.check, _key(candidate.output))] = (
                        call.output.check,
                        candidate.output,
                        f"output of tool {call.tool}",
                    )
        if not needed:
            return {}
        if self.judging is None:
            raise LookupError(f"tool-call checks not judged: {NO_JUDGE}")
        return {
            key: (await self.judging.check(text, value, what)).passed for key, (text, value, what) in needed.items()
        }

    def _success(self, attempt: AttemptState, checks: list[tuple[str, bool]]) -> MetricResult | SpanAttribute:
        errors = attempt.all_errors
        if errors:
            return MetricResult.failure("success", "not every check could be graded: " + "; ".join(errors), 1.0)
        failed = [name for name, ok in checks if not ok]
        skipped = attempt.all_skipped
        if skipped and not failed:  # a failed check decides it; otherwise the ungraded ones would
            return _skipped("success", "not every check was graded: " + "; ".join(skipped))
        explanation = (
            "Every ground-truth check passed: " + ", ".join(n for n, _ in checks)
            if not failed
            else "Failed: " + ", ".join(failed)
        )
        return MetricResult(name="success", score=0.0 if failed else 1.0, threshold=1.0, explanation=explanation)


def _over_budget(error: JudgeError) -> bool:
    return error.error_type == BUDGET_EXHAUSTED


def _skipped(metric: str, why: BaseException | str) -> SpanAttribute:
    """What a metric the judge's budget kept from being graded leaves on the span."""
    return SpanAttribute(result_keys(metric).skipped, str(why))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


FACTORY = ComponentFactory("processor", "ground_truth", GroundTruthConfig, GroundTruth)
