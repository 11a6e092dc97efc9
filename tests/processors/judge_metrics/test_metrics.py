"""Each of the seven judge metrics: its question, its score and the metadata docs/metrics.md lists."""

from __future__ import annotations

import pytest

from spanscore.processors.judge_metrics.planner import JudgePlan
from spanscore.processors.judge_metrics.prompts import Redaction
from spanscore.processors.judge_metrics.rubrics import (
    NO_PLAN,
    NO_TOOL_CALLS,
    NO_TOOLS,
    NOT_APPLICABLE,
    RUBRICS,
    TraceFacts,
)
from tests.support.scripted_judge import (
    EXTRACTED,
    ScriptedJudge,
    arguments_answer,
    flight_trace,
    full_script,
    llm_step,
    scale,
)


async def run_one(metric, script=None, trace=None, **options):
    judge = ScriptedJudge(script or full_script(), validate=options.pop("validate", True))
    results, _ = await JudgePlan(metrics=[metric], **options).run(trace or flight_trace(), judge)
    assert [r.name for r in results] == [metric]
    return results[0], judge


async def test_task_completion_extracts_task_and_outcome_then_scores_the_verdict():
    result, judge = await run_one("task_completion")
    assert [r.schema_name for r in judge.requests] == ["extract", "task_completion"]
    extract = judge.calls("extract")[0]
    assert list(extract.schema["properties"]) == ["task", "outcome"]
    assert "strictly factual" in extract.user and '"successfully"' in extract.user
    assert "task: " + EXTRACTED["task"] in judge.calls("task_completion")[0].user
    assert result.score == 0.9 and result.label == "pass"
    assert result.explanation == "Booked the cheapest flight under $500."
    assert result.metadata == {
        "task": EXTRACTED["task"],
        "outcome": EXTRACTED["outcome"],
        "threshold": 0.5,
        "success": True,
    }


async def test_tool_correctness_reads_tools_from_the_trace_not_from_the_judge():
    result, judge = await run_one("tool_correctness")
    assert [r.schema_name for r in judge.requests] == ["tool_correctness"]  # no extraction
    user = judge.requests[0].user
    for word in ("over-selection", "under-selection", "mis-selection"):
        assert word in user
    assert result.score == 0.8
    assert result.metadata == {
        "user_input": "Find flights from SFO to JFK under $500 and book the cheapest.",
        "tools_called": [
            {"name": "flight_search", "parameters": {"origin": "SFO", "destination": "JFK", "max_price": 1000}},
            {"name": "flight_search", "parameters": {"origin": "SFO", "destination": "JFK", "max_price": 500}},
            {"name": "book_flight", "parameters": {"flight": "UA 15"}},
        ],
        "available_tools": [
            {"name": "flight_search", "description": "Search flights"},
            {"name": "book_flight", "description": "Book a flight"},
            {"name": "weather_lookup", "description": "Get weather forecast"},
        ],
        "threshold": 0.5,
        "success": True,
    }


async def test_argument_correctness_scores_yes_over_total_from_one_call():
    script = {"argument_correctness": arguments_answer("no", "yes", "yes")}
    result, judge = await run_one("argument_correctness", script)
    assert len(judge.requests) == 1
    schema = judge.requests[0].schema["properties"]["verdicts"]
    assert schema["minItems"] == schema["maxItems"] == 3
    assert schema["items"]["properties"]["verdict"]["enum"] == ["yes", "no"]
    # 2 "yes" of 3 verdicts -> 2/3
    assert result.score == pytest.approx(0.6667, abs=1e-4)
    assert result.explanation == "2 of 3 tool calls had correct arguments. One search used the wrong price limit."
    assert result.metadata == {
        "user_input": "Find flights from SFO to JFK under $500 and book the cheapest.",
        "verdicts": [
            {"verdict": "no", "reason": "max_price was 1000, not 500"},
            {"verdict": "yes", "reason": None},
            {"verdict": "yes", "reason": None},
        ],
        "threshold": 0.5,
        "success": True,
    }


async def test_argument_correctness_without_tool_calls_is_skipped_without_a_call():
    trace = flight_trace(steps=[llm_step(result="Hello")])
    result, judge = await run_one("argument_correctness", {}, trace)
    assert judge.requests == []
    assert (result.score, result.error, result.error_type) == (None, NO_TOOL_CALLS, NOT_APPLICABLE)
    assert result.label is None


async def test_tool_correctness_without_tools_offered_or_called_is_skipped_without_a_call():
    trace = flight_trace(steps=[llm_step(result="Hello")], available_tools=[])
    assert trace.available_tools == [] and trace.tool_steps == []
    result, judge = await run_one("tool_correctness", {}, trace)
    assert judge.requests == []
    assert (result.score, result.error, result.error_type) == (None, NO_TOOLS, NOT_APPLICABLE)


async def test_tool_correctness_with_tools_offered_and_none_called_is_judged():
    # Not calling an offered tool is what the metric judges (under-selection).
    trace = flight_trace(steps=[llm_step(result="Hello")])
    assert trace.available_tools and not trace.tool_steps
    result, judge = await run_one("tool_correctness", trace=trace)
    assert [r.schema_name for r in judge.requests] == ["tool_correctness"]
    assert result.score is not None and result.error is None


async def test_argument_correctness_with_a_wrong_verdict_count_fails():
    script = {"argument_correctness": arguments_answer("yes", "yes")}
    result, _ = await run_one("argument_correctness", script, validate=False)
    assert result.score is None and result.error_type == "malformed_answer"
    assert "2 verdicts for 3 tool calls" in result.error


async def test_step_efficiency_extracts_only_the_task():
    result, judge = await run_one("step_efficiency")
    assert list(judge.calls("extract")[0].schema["properties"]) == ["task"]
    user = judge.calls("step_efficiency")[0].user
    assert "redundant" in user and "speculative" in user
    assert result.score == 0.6
    assert result.metadata == {"task": EXTRACTED["task"], "threshold": 0.5, "success": True}


async def test_confidence_is_one_call_with_its_own_score_key():
    result, judge = await run_one("confidence")
    assert [r.schema_name for r in judge.requests] == ["confidence"]
    assert list(judge.requests[0].schema["properties"]) == ["confidence", "reason"]
    for word in ("decisive", "appropriate", "consistency", "hedging"):
        assert word in judge.requests[0].user
    assert result.score == 0.7
    assert result.metadata == {"threshold": 0.5, "success": True}


@pytest.mark.parametrize("metric", ["plan_adherence", "plan_quality"])
async def test_plan_metrics_score_the_extracted_plan(metric):
    result, judge = await run_one(metric)
    assert list(judge.calls("extract")[0].schema["properties"]) == ["task", "plan"]
    assert "1. search flights\n2. pick the cheapest\n3. book it" in judge.calls(metric)[0].user
    assert result.metadata == {"task": EXTRACTED["task"], "plan": EXTRACTED["plan"], "threshold": 0.5, "success": True}


@pytest.mark.parametrize("metric", ["plan_adherence", "plan_quality"])
async def test_plan_metrics_without_a_plan_are_skipped_without_a_scoring_call(metric):
    result, judge = await run_one(metric, full_script({**EXTRACTED, "plan": ["  "]}))
    assert [r.schema_name for r in judge.requests] == ["extract"]
    assert (result.score, result.error, result.error_type) == (None, NO_PLAN, NOT_APPLICABLE)


async def test_threshold_decides_the_label():
    result, _ = await run_one("step_efficiency", thresholds={"step_efficiency": 0.7})
    assert result.score == 0.6 and result.label == "fail" and result.threshold == 0.7
    assert result.metadata["success"] is False


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), True, "0.9", None])
async def test_out_of_range_scores_are_rejected(bad):
    # The client validates against the schema; the rubric checks again, whatever the client did.
    result, _ = await run_one("tool_correctness", {"tool_correctness": {"score": bad, "reason": "x"}}, validate=False)
    assert result.score is None and result.error_type == "malformed_answer"


async def test_unknown_verdicts_are_rejected():
    answer = arguments_answer("yes", "maybe", "yes")
    result, _ = await run_one("argument_correctness", {"argument_correctness": answer}, validate=False)
    assert result.error_type == "malformed_answer" and "maybe" in result.error


def test_every_score_schema_declares_its_bounds():
    facts = TraceFacts.from_trace(flight_trace(), Redaction())
    for name, rubric in RUBRICS.items():
        schema = rubric.schema(facts)
        assert schema["additionalProperties"] is False and set(schema["required"]) == set(schema["properties"])
        if name == "argument_correctness":
            assert schema["properties"]["verdicts"]["items"]["properties"]["verdict"]["enum"] == ["yes", "no"]
            continue
        (key,) = [k for k in schema["properties"] if k != "reason"]
        assert schema["properties"][key] == {"type": "number", "minimum": 0.0, "maximum": 1.0}


async def test_a_reason_key_score_of_zero_still_counts():
    result, _ = await run_one("confidence", {"confidence": scale(0.0, "Abandoned every approach.", "confidence")})
    assert result.score == 0.0 and result.label == "fail"
