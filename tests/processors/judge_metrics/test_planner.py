"""The calls a trace costs in each mode, and failures kept to the metrics they touch."""

from __future__ import annotations

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.planner import JudgePlan
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES, NO_PLAN, NO_TOOL_CALLS, NOT_APPLICABLE
from tests.support.scripted_judge import (
    EXTRACTED,
    PER_METRIC_ANSWERS,
    ScriptedJudge,
    flight_trace,
    full_script,
    llm_step,
)

EXTRACTION_READERS = {"task_completion", "step_efficiency", "plan_adherence", "plan_quality"}


async def run(script=None, trace=None, **options):
    judge = ScriptedJudge(script or full_script())
    results, usage = await JudgePlan(**options).run(trace or flight_trace(), judge)
    return results, usage, judge


async def test_per_metric_scores_all_seven_in_eight_calls_with_one_shared_extraction():
    results, usage, judge = await run()
    assert [r.name for r in results] == list(METRIC_NAMES)
    assert len(judge.requests) == 8 == JudgePlan().max_calls()
    assert sorted(r.schema_name for r in judge.requests) == sorted(["extract", *METRIC_NAMES])
    assert list(judge.calls("extract")[0].schema["properties"]) == ["task", "outcome", "plan"]
    assert usage["calls"] == 8 and usage["output_tokens"] == 80
    assert usage["input_tokens"] == sum(sum(len(m["content"]) for m in r.messages) // 4 for r in judge.requests)
    assert all(r.error is None for r in results)


async def test_combined_scores_all_seven_in_two_calls():
    results, usage, judge = await run(mode="combined")
    assert [r.schema_name for r in judge.requests] == ["extract", "combined"]
    assert usage["calls"] == 2 == JudgePlan(mode="combined").max_calls()
    combined = judge.calls("combined")[0]
    assert list(combined.schema["properties"]) == list(METRIC_NAMES)
    for name in METRIC_NAMES:
        assert f"## {name}\n" in combined.user
    scores = {r.name: r.score for r in results}
    assert scores == pytest.approx(
        {
            "task_completion": 0.9,
            "tool_correctness": 0.8,
            "argument_correctness": 2 / 3,
            "step_efficiency": 0.6,
            "confidence": 0.7,
            "plan_adherence": 1.0,
            "plan_quality": 0.75,
        }
    )


@pytest.mark.parametrize("mode", ["per_metric", "combined"])
async def test_both_modes_give_the_same_results_from_the_same_answers(mode):
    per_metric, _, _ = await run()
    results, _, _ = await run(mode=mode)
    assert [r.model_dump() for r in results] == [r.model_dump() for r in per_metric]


@pytest.mark.parametrize("mode", ["per_metric", "combined"])
async def test_extraction_is_skipped_when_no_enabled_metric_reads_it(mode):
    results, usage, judge = await run(metrics=["tool_correctness", "argument_correctness", "confidence"], mode=mode)
    assert not judge.calls("extract")
    assert usage["calls"] == (3 if mode == "per_metric" else 1)
    assert all(r.score is not None for r in results)


async def test_extraction_asks_only_for_the_fields_enabled_metrics_read():
    _, _, judge = await run(metrics=["step_efficiency", "plan_quality"])
    assert list(judge.calls("extract")[0].schema["properties"]) == ["task", "plan"]


@pytest.mark.parametrize("mode", ["per_metric", "combined"])
async def test_nothing_to_judge_costs_only_the_extraction(mode):
    trace = flight_trace(steps=[llm_step(result="Hi")])
    metrics = ["argument_correctness", "plan_adherence", "plan_quality"]
    results, _, judge = await run(full_script({**EXTRACTED, "plan": []}), trace, metrics=metrics, mode=mode)
    assert [r.schema_name for r in judge.requests] == ["extract"]
    assert [(r.score, r.error, r.error_type) for r in results] == [
        (None, NO_TOOL_CALLS, NOT_APPLICABLE),
        (None, NO_PLAN, NOT_APPLICABLE),
        (None, NO_PLAN, NOT_APPLICABLE),
    ]


async def test_combined_leaves_planless_plan_metrics_out_of_the_scoring_call():
    results, _, judge = await run(full_script({**EXTRACTED, "plan": []}), mode="combined")
    combined = judge.calls("combined")[0]
    assert "plan_adherence" not in combined.schema["properties"]
    assert "## plan_quality" not in combined.user
    assert "plan:" not in combined.user.split("</trace_data>")[1]
    assert {r.name: r.error for r in results}["plan_quality"] == NO_PLAN


@pytest.mark.parametrize("mode", ["per_metric", "combined"])
async def test_an_extraction_failure_fails_only_the_metrics_that_read_it(mode):
    script = {**full_script(), "extract": JudgeError("judge timed out", "timeout")}
    results, _, _ = await run(script, mode=mode)
    for result in results:
        if result.name in EXTRACTION_READERS:
            assert (result.score, result.error, result.error_type) == (None, "judge timed out", "timeout")
            assert result.label is None
        else:
            assert result.error is None and result.score is not None


async def test_a_scoring_failure_fails_only_its_metric():
    script = {**full_script(), "confidence": JudgeError("server said 500", "server_error")}
    results, usage, _ = await run(script)
    by_name = {r.name: r for r in results}
    assert by_name["confidence"].error_type == "server_error"
    assert all(r.score is not None for name, r in by_name.items() if name != "confidence")
    assert usage["calls"] == 7  # the failed request reported no reply


async def test_a_malformed_part_of_a_combined_answer_fails_only_that_metric():
    def combined(request):
        answer = {name: PER_METRIC_ANSWERS[name] for name in request.schema["properties"]}
        answer["argument_correctness"] = {"verdicts": [], "reason": ""}
        answer["step_efficiency"] = {"score": 7, "reason": "out of range"}
        return answer

    judge = ScriptedJudge({**full_script(), "combined": combined}, validate=False)
    results, _ = await JudgePlan(mode="combined").run(flight_trace(), judge)
    errors = {r.name: r.error_type for r in results}
    assert errors == {name: None for name in METRIC_NAMES} | {
        "argument_correctness": "malformed_answer",
        "step_efficiency": "malformed_answer",
    }


async def test_a_combined_call_failure_fails_the_metrics_it_scored():
    script = {**full_script({**EXTRACTED, "plan": []}), "combined": JudgeError("rate limited", "rate_limited")}
    results, _, _ = await run(script, mode="combined")
    by_name = {r.name: r for r in results}
    # skipped after the extraction found no plan, never in the failed call
    assert by_name["plan_adherence"].error_type == NOT_APPLICABLE
    assert {r.error_type for n, r in by_name.items() if n not in ("plan_adherence", "plan_quality")} == {"rate_limited"}


async def test_results_follow_the_configured_order():
    metrics = ["plan_quality", "confidence", "task_completion"]
    results, _, _ = await run(metrics=metrics, mode="combined")
    assert [r.name for r in results] == metrics


@pytest.mark.parametrize(
    "options, message",
    [
        ({"metrics": ["coherence"]}, "unknown judge metrics"),
        ({"metrics": ["confidence", "confidence"]}, "listed twice"),
        ({"mode": "batched"}, "mode"),
        ({"thresholds": {"confidence": 1.5}}, "thresholds.confidence"),
        ({"thresholds": {"nope": 0.5}}, "unknown judge metric"),
        ({"trials": 2}, "positive odd integer"),
        ({"max_field_chars": 0}, "max_field_chars"),
    ],
)
def test_invalid_plans_are_rejected_naming_the_key(options, message):
    with pytest.raises(ValueError, match=message):
        JudgePlan(**options)


def test_max_calls_counts_trials_on_scoring_calls_only():
    assert JudgePlan(trials=3).max_calls() == 1 + 3 * 7
    assert JudgePlan(mode="combined", trials=3).max_calls() == 1 + 3
    assert JudgePlan(metrics=["confidence"]).max_calls() == 1


async def test_a_malformed_extraction_fails_its_readers_as_a_malformed_answer():
    script = {**full_script(), "extract": {"task": "Book", "outcome": "Booked", "plan": "search then book"}}
    judge = ScriptedJudge(script, validate=False)
    results, _ = await JudgePlan().run(flight_trace(), judge)
    failed = {r.name for r in results if r.error_type == "malformed_answer"}
    assert failed == EXTRACTION_READERS
    assert not any(r.schema_name in EXTRACTION_READERS for r in judge.requests)
