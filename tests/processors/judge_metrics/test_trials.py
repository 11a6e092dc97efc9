"""N judgments per call: median scores, majority verdicts, early stop and spread."""

from __future__ import annotations

import re
import statistics

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.planner import JudgePlan
from spanscore.processors.judge_metrics.trials import majority, median, run_trials, spread
from tests.support.scripted_judge import (
    PER_METRIC_ANSWERS,
    ScriptedJudge,
    arguments_answer,
    flight_trace,
    full_script,
    scale,
)


def by_trial(*answers):
    """A script entry answering trial k (0-based, read from the prompt) with answers[k]."""

    def answer(request):
        found = re.search(r"\(independent judgment (\d+)\)$", request.user)
        return answers[int(found.group(1)) - 1 if found else 0]

    return answer


def confidence(*scores):
    return by_trial(*(scale(s, f"reason for {s}", "confidence") for s in scores))


async def run(metric, entry, **options):
    judge = ScriptedJudge({**full_script(), metric: entry})
    results, usage = await JudgePlan(metrics=[metric], **options).run(flight_trace(), judge)
    return results[0], usage, judge


async def test_scores_aggregate_by_median_with_the_median_trial_explaining():
    result, usage, judge = await run("confidence", confidence(0.2, 0.9, 0.6), trials=3)
    assert len(judge.requests) == 3 and usage["calls"] == 3
    assert result.score == 0.6
    assert result.explanation == "reason for 0.6"
    assert result.metadata["trials"] == {
        "requested": 3,
        "run": 3,
        "failed": 0,
        "scores": [0.2, 0.9, 0.6],
        "min": 0.2,
        "max": 0.9,
        "stdev": round(statistics.pstdev([0.2, 0.9, 0.6]), 4),  # 0.2867
    }


async def test_verdicts_aggregate_by_majority_per_tool_call():
    entry = by_trial(
        arguments_answer("no", "yes", "yes"),
        arguments_answer("yes", "yes", "no"),
        arguments_answer("no", "yes", "yes", reason="Call 1 had the wrong price."),
    )
    result, _, _ = await run("argument_correctness", entry, trials=3)
    # Majorities: #1 no (2 of 3), #2 yes (3 of 3), #3 yes (2 of 3) -> 2/3.
    assert [v["verdict"] for v in result.metadata["verdicts"]] == ["no", "yes", "yes"]
    assert result.score == pytest.approx(0.6667, abs=1e-4)
    assert result.metadata["trials"]["scores"] == [0.6667, 0.6667, 0.6667]
    assert result.explanation.startswith("2 of 3 tool calls had correct arguments.")


async def test_early_stop_skips_trials_that_cannot_change_the_majority():
    # 5 trials need 3 agreeing votes; the first wave of 3 all pass.
    result, usage, judge = await run("confidence", confidence(0.8, 0.9, 0.7, 0.1, 0.1), trials=5, early_stop=True)
    assert len(judge.requests) == 3 and usage["calls"] == 3
    assert result.score == 0.8
    assert result.metadata["trials"]["requested"] == 5 and result.metadata["trials"]["run"] == 3


async def test_early_stop_runs_the_smallest_wave_that_could_settle():
    # Wave 1 (3 trials): pass, fail, pass -> 2 of the 3 needed; one more pass settles it.
    result, _, judge = await run("confidence", confidence(0.8, 0.2, 0.9, 0.7, 0.1), trials=5, early_stop=True)
    assert len(judge.requests) == 4
    assert result.metadata["trials"]["scores"] == [0.8, 0.2, 0.9, 0.7]
    assert result.score == pytest.approx(0.75)  # median of the 4 that ran
    assert result.label == "pass"


async def test_early_stop_waits_for_every_tool_call_verdict_to_settle():
    agree = by_trial(
        arguments_answer("no", "yes", "yes"), arguments_answer("no", "yes", "yes"), arguments_answer("yes", "no", "no")
    )
    _, _, judge = await run("argument_correctness", agree, trials=3, early_stop=True)
    assert len(judge.requests) == 2
    split = by_trial(
        arguments_answer("no", "yes", "yes"), arguments_answer("yes", "yes", "yes"), arguments_answer("no", "yes", "no")
    )
    result, _, judge = await run("argument_correctness", split, trials=3, early_stop=True)
    assert len(judge.requests) == 3
    assert [v["verdict"] for v in result.metadata["verdicts"]] == ["no", "yes", "yes"]


async def test_early_stop_in_combined_mode_votes_on_every_metric_in_the_call():
    def combined(request):
        found = re.search(r"\(independent judgment (\d+)\)$", request.user)
        trial = int(found.group(1)) - 1 if found else 0
        answer = {name: PER_METRIC_ANSWERS[name] for name in request.schema["properties"]}
        if trial == 1:  # one trial fails confidence: its majority is open after the first wave
            answer["confidence"] = scale(0.1, "unsure", "confidence")
        return answer

    judge = ScriptedJudge({**full_script(), "combined": combined})
    metrics = ["confidence", "tool_correctness"]
    results, usage = await JudgePlan(metrics=metrics, mode="combined", trials=5, early_stop=True).run(
        flight_trace(), judge
    )
    assert usage["calls"] == 4  # 3, then 1 more to settle confidence
    assert [r.metadata["trials"]["run"] for r in results] == [4, 4]


async def test_extraction_runs_once_whatever_the_trials():
    _, _, judge = await run("step_efficiency", PER_METRIC_ANSWERS["step_efficiency"], trials=3)
    assert [r.schema_name for r in judge.requests].count("extract") == 1
    assert len(judge.calls("step_efficiency")) == 3
    extract_user = judge.calls("extract")[0].user
    assert "(independent judgment" not in extract_user


async def test_a_failed_trial_is_left_out_and_counted():
    entry = by_trial(
        scale(0.4, "low", "confidence"), JudgeError("timed out", "timeout"), scale(0.8, "high", "confidence")
    )
    result, _, _ = await run("confidence", entry, trials=3)
    assert result.score == pytest.approx(0.6)
    assert result.metadata["trials"] == {
        "requested": 3,
        "run": 3,
        "failed": 1,
        "scores": [0.4, 0.8],
        "min": 0.4,
        "max": 0.8,
        "stdev": 0.2,
    }


async def test_all_trials_failing_fails_the_metric_with_the_judge_error():
    result, _, _ = await run("confidence", JudgeError("rate limited", "rate_limited"), trials=3)
    assert result.score is None and result.error_type == "rate_limited"


async def test_a_single_trial_records_no_spread():
    result, _, _ = await run("confidence", confidence(0.7))
    assert "trials" not in result.metadata


async def test_run_trials_asks_each_index_once_and_in_waves():
    asked = []

    async def ask(index):
        asked.append(index)
        return {"pass": index != 1}

    run = await run_trials(ask, 7, votes=lambda a: {"x": a["pass"]}, early_stop=True)
    # 7 trials need 4 votes: wave 0-3 gives 3 pass / 1 fail -> 1 more pass settles it.
    assert asked == [0, 1, 2, 3, 4]
    assert run.run == 5 and not run.errors


async def test_run_trials_without_early_stop_runs_all():
    run = await run_trials(lambda i: _answer(i), 5, votes=lambda a: {"x": True}, early_stop=False)
    assert run.run == 5


async def _answer(index):
    return {"i": index}


def test_aggregation_helpers():
    assert median([0.1, 0.9, 0.3]) == 0.3
    assert majority(["yes", "no", "yes"], tie="no") == "yes"
    assert majority(["yes", "no"], tie="no") == "no"
    assert spread([0.5]) == {"min": 0.5, "max": 0.5, "stdev": 0.0}
    assert spread([0.0, 1.0]) == {"min": 0.0, "max": 1.0, "stdev": 0.5}
