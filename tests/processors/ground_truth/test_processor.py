"""The `ground_truth` processor in the pipeline: attempts joined to cases and graded.

The pipeline runs in memory on a hand-held clock; the judge is the real client against
the loopback OpenAI-protocol server, whose handler decides from markers in the dataset's
texts: a subgoal `[needs:X]` is complete once the transcript holds X; a check passes when
the checked value holds "Oslo"; an answer scores 0.9.
"""

from __future__ import annotations

import json
import time

import pytest

from spanscore.core.score_encoding import SESSION_SPAN_NAME
from spanscore.exporters.memory import MemoryExporter
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.ground_truth.processor import NO_JUDGE, GroundTruth, GroundTruthConfig
from spanscore.receivers.memory import MemoryReceiver
from tests.support.ground_truth_judge import DATASET, judge
from tests.support.judge_answers import schema_of
from tests.support.openai_server import ErrorReply, OpenAIServer, Reply
from tests.support.spans import new_span_id, new_trace_id, request_of, span


@pytest.fixture
def server():
    with OpenAIServer(handler=lambda request: Reply(content=json.dumps(judge(request)))) as running:
        yield running


def turn(trace_id: bytes, question: str, answer: str, tool: tuple[str, str, str] | None = None) -> list:
    root = new_span_id()
    messages = f'[{{"role": "user", "parts": [{{"type": "text", "content": "{question}"}}]}}]'
    output = f'[{{"role": "assistant", "parts": [{{"type": "text", "content": "{answer}"}}]}}]'
    spans = [
        span(
            trace_id,
            "invoke_agent weather",
            span_id=root,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "session.id": "attempt-1",
                "gen_ai.input.messages": messages,
                "gen_ai.output.messages": output,
            },
        )
    ]
    if tool:
        spans.append(
            span(
                trace_id,
                "execute_tool",
                parent=root,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": tool[0],
                    "gen_ai.tool.call.arguments": tool[1],
                    "gen_ai.tool.call.result": tool[2],
                },
            )
        )
    return spans


async def graded(tmp_path, dataset: str, judge: dict | None, turns: list[list]) -> MemoryExporter:
    """`turns` (span lists of the oslo-trip case) through a pipeline with a ground_truth
    processor, one turn per assembler tick, then drained: what was exported."""
    path = tmp_path / "suite.yaml"
    path.write_text(dataset)
    settings = {"dataset": str(path), "trials": 1, **({"judge": judge} if judge else {})}
    processor = GroundTruth("ground_truth", GroundTruthConfig.model_validate(settings))
    exporter = MemoryExporter()
    clock = [0.0]
    pipeline = Pipeline(
        Assembler(PipelineSettings(trace_wait=1.0)), [("ground_truth", processor)], [exporter], clock=lambda: clock[0]
    )
    await processor.start()
    await pipeline.start()
    receiver = MemoryReceiver(pipeline.intake)
    for spans in turns:
        receiver.send(request_of(spans, resource_attributes={"eval.case.id": "oslo-trip"}))
        clock[0] += 2.0
        pipeline.tick()
        await pipeline.settle()
    await pipeline.drain(time.monotonic() + 10)
    await processor.shutdown(time.monotonic() + 10)
    return exporter


OSLO_WEATHER = ("get_weather", '{"city": "Oslo"}', "Snowing, -3 C")  # the call the case expects


def judge_settings(server, **extra) -> dict:
    return {"base_url": server.base_url, "model": "gpt-test", **extra}


async def test_a_second_turn_completes_a_subgoal_and_the_completed_one_is_not_judged_again(tmp_path, server):
    first, second = new_trace_id(), new_trace_id()
    exporter = await graded(
        tmp_path,
        DATASET,
        judge_settings(server),
        [
            turn(first, "What's the weather in Oslo?", "It is Snowing, -3 C", OSLO_WEATHER),
            turn(second, "What should I wear?", "Wear a wool coat"),
        ],
    )

    subgoal_requests = [r for r in server.requests if schema_of(r)[0] == "subgoals"]
    assert len(subgoal_requests) == 2  # one per turn (batched, 1 trial)
    asked = [sorted(schema_of(r)[1]["properties"]) for r in subgoal_requests]
    assert asked == [["subgoal_0", "subgoal_1"], ["subgoal_1"]]  # the completed one is not asked again

    turn_one = exporter.only(first)
    assert turn_one.anchor_attributes["eval.case.id"] == "oslo-trip"
    assert turn_one.scores == {"answer_correctness": 0.9, "tool_usage": 1.0}
    assert turn_one.anchor_attributes["eval.judge.calls"] == 2  # the answer and the turn's subgoals
    assert exporter.only(second).anchor_attributes["eval.judge.calls"] == 1  # the one open subgoal
    [carrier] = exporter.named(SESSION_SPAN_NAME)
    attributes = carrier.anchor_attributes
    assert attributes["eval.case.id"] == "oslo-trip"
    assert attributes["eval.judge.calls"] == 1  # the check on the city, asked when the attempt closed
    assert (
        "(pass@1 1.00, pass@3 1.00, pass^1 1.00, pass^3 1.00)"
        in attributes["eval.conversation_correctness.explanation"]
    )
    results = {r.name: r for r in carrier.results}
    assert results["progress"].metadata["progress_by_turn"] == [0.5, 1.0]
    assert results["progress"].score == 1.0
    # padded to 20 turns: [0.5, 1, 1, ...]: AUC = (0.75 + 18 * 1) / 19
    assert results["progress_auc"].score == pytest.approx((0.75 + 18) / 19)
    assert results["progress_per_turn"].score == 0.5  # max 1.0 first reached at index 1
    assert results["tool_call_accuracy"].score == 1.0
    assert results["conversation_correctness"].score == 1.0
    assert results["success"].score == 1.0


def test_an_even_trial_count_is_a_config_error(tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)
    with pytest.raises(ValueError, match="trials must be odd"):
        GroundTruthConfig.model_validate({"dataset": str(dataset), "trials": 4})


def test_a_broken_dataset_is_a_config_error_naming_the_case(tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET.replace("check: a Norwegian city", "check: a Norwegian city, value: Oslo"))
    with pytest.raises(ValueError, match=r"cases\[0\] \(id oslo-trip\)\.expected_tool_calls\[0\]\.parameters\[0\]"):
        GroundTruthConfig.model_validate({"dataset": str(dataset)})


async def test_without_a_judge_subgoals_are_errors_and_value_checks_still_score(tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET.replace("check: a Norwegian city", "value: Oslo"))
    processor = GroundTruth("ground_truth", GroundTruthConfig.model_validate({"dataset": str(dataset)}))
    exporter = MemoryExporter()
    pipeline = Pipeline(
        Assembler(PipelineSettings(trace_wait=1.0)), [("ground_truth", processor)], [exporter], clock=lambda: 5.0
    )
    await processor.start()
    await pipeline.start()
    trace_id = new_trace_id()
    MemoryReceiver(pipeline.intake).send(
        request_of(
            turn(
                trace_id,
                "What's the weather in Oslo?",
                "It is Snowing, -3 C",
                ("get_weather", '{"city": "Oslo"}', "Snowing, -3 C"),
            ),
            resource_attributes={"eval.case.id": "oslo-trip"},
        )
    )
    await pipeline.drain(time.monotonic() + 10)
    [carrier] = exporter.named(SESSION_SPAN_NAME)
    results = {r.name: r for r in carrier.results}
    assert results["tool_call_accuracy"].score == 1.0
    assert results["progress"].error == f"subgoals not judged: {NO_JUDGE}"
    assert results["success"].error.startswith("not every check could be graded: ")
    turn_results = {r.name: r for r in exporter.only(trace_id).results}
    assert turn_results["answer_correctness"].error == NO_JUDGE
    assert turn_results["tool_usage"].score == 1.0


async def test_past_the_judge_budget_metrics_are_skipped_not_failed(tmp_path, server):
    dataset = DATASET.replace(
        "      - message: What should I wear?",
        "      - message: What should I wear?\n        expected_response: A wool coat",
    )
    first, second = new_trace_id(), new_trace_id()
    exporter = await graded(
        tmp_path,
        dataset,
        judge_settings(server, budget={"requests_per_hour": 1}),
        [
            turn(first, "What's the weather in Oslo?", "It is Snowing, -3 C", OSLO_WEATHER),
            turn(second, "What should I wear?", "Wear a wool coat"),
        ],
    )

    # The one request the hour allows grades the first answer; nothing else is sent.
    assert [schema_of(r)[0] for r in server.requests] == ["answer_correctness"]
    refused = "judge budget exhausted: 1 requests in the last hour"
    turn_one = exporter.only(first)
    assert turn_one.scores == {"answer_correctness": 0.9, "tool_usage": 1.0}
    turn_two = exporter.only(second)
    assert [r.name for r in turn_two.results] == []  # skipped, not an error
    assert refused in turn_two.anchor_attributes["eval.answer_correctness.skipped"]

    [carrier] = exporter.named(SESSION_SPAN_NAME)
    results = {r.name: r for r in carrier.results}
    assert sorted(results) == ["conversation_correctness"]
    assert results["conversation_correctness"].score == 1.0  # 1 of the 1 graded answer
    attributes = carrier.anchor_attributes
    for name in ("progress", "progress_auc", "progress_per_turn", "success_final_turn"):
        assert attributes[f"eval.{name}.skipped"].startswith("subgoals at turn 0 not judged: ")
        assert refused in attributes[f"eval.{name}.skipped"]
    assert refused in attributes["eval.tool_call_accuracy.skipped"]
    assert attributes["eval.success.skipped"].startswith("not every check was graded: turn 1 answer not graded: ")
    assert not any(key.endswith(".error") for key in attributes)


async def test_a_failed_check_decides_success_even_when_the_budget_left_others_ungraded(tmp_path, server):
    # The expected get_weather call is never made: tool_call_accuracy fails without asking the judge.
    exporter = await graded(
        tmp_path,
        DATASET,
        judge_settings(server, budget={"requests_per_hour": 1}),
        [turn(new_trace_id(), "What's the weather in Oslo?", "It is Snowing, -3 C")],
    )
    [carrier] = exporter.named(SESSION_SPAN_NAME)
    results = {r.name: r for r in carrier.results}
    assert results["tool_call_accuracy"].score == 0.0
    assert "eval.progress.skipped" in carrier.anchor_attributes
    assert results["success"].score == 0.0 and "every expected tool call made" in results["success"].explanation


# Tool utilization: the judge's view when it grades the turn's answer, else the values found.


def judge_saying(uses_tool_results: bool):
    def handler(request):
        answer = judge(request)
        if schema_of(request)[0] == "answer_correctness":
            answer = {**answer, "uses_tool_results": uses_tool_results}
        return Reply(content=json.dumps(answer))

    return handler


async def test_the_judges_utilization_decides_tool_usage_over_the_values_found(tmp_path):
    first, second = new_trace_id(), new_trace_id()
    turns = [
        turn(first, "What's the weather in Oslo?", "It is Snowing, -3 C", OSLO_WEATHER),  # quotes -3
        turn(second, "What should I wear?", "Wear a wool coat"),
    ]
    with OpenAIServer(handler=judge_saying(False)) as server:
        exporter = await graded(tmp_path, DATASET, judge_settings(server), turns)
    results = {r.name: r for r in exporter.only(first).results}
    usage, answer = results["tool_usage"], results["answer_correctness"]
    assert usage.score == 0.75  # 0.25 x (1 + 1 + 1 + 0)
    assert usage.explanation == (
        "Tool usage 0.75 (turn 0): selection 1.00, parameters 1.00, sequence 1.00, utilization 0.00 (judge)."
    )
    assert usage.metadata["utilization_by"] == "judge"
    assert answer.score == 0.9 and answer.metadata["correct"] is False
    assert answer.explanation.endswith("; tool usage 0.75 is below 1.0")
    [carrier] = exporter.named(SESSION_SPAN_NAME)
    success = {r.name: r for r in carrier.results}["success"]
    assert success.score == 0.0
    assert success.explanation == "Failed: every turn's tool usage at tool_threshold, every graded answer correct"


async def test_the_judge_can_find_use_where_no_value_is_quoted(tmp_path):
    trace_id = new_trace_id()
    turns = [turn(trace_id, "What's the weather in Oslo?", "Bundle up, it is freezing", OSLO_WEATHER)]
    with OpenAIServer(handler=judge_saying(True)) as server:
        exporter = await graded(tmp_path, DATASET, judge_settings(server), turns)
    usage = {r.name: r for r in exporter.only(trace_id).results}["tool_usage"]
    assert usage.score == 1.0 and usage.explanation.endswith("utilization 1.00 (judge).")


async def test_without_the_judges_view_the_values_of_the_results_decide(tmp_path):
    def failing_answers(request):
        if schema_of(request)[0] == "answer_correctness":
            return ErrorReply(400, "bad request", error_type="invalid_request_error")
        return Reply(content=json.dumps(judge(request)))

    quoting, ignoring = new_trace_id(), new_trace_id()
    with OpenAIServer(handler=failing_answers) as server:
        exporter = await graded(
            tmp_path,
            DATASET,
            judge_settings(server),
            [turn(quoting, "What's the weather in Oslo?", "Snowing at -3°C in Oslo", OSLO_WEATHER)],
        )
    results = {r.name: r for r in exporter.only(quoting).results}
    assert results["answer_correctness"].error is not None  # no verdict, hence no judge's view
    assert results["tool_usage"].explanation.endswith("utilization 1.00 (values found: Snowing, -3).")
    assert results["tool_usage"].metadata["utilization_by"] == "values"

    exporter = await graded(  # no judge at all
        tmp_path,
        DATASET.replace("check: a Norwegian city", "value: Oslo"),
        None,
        [turn(ignoring, "What's the weather in Oslo?", "I can't check the weather now.", OSLO_WEATHER)],
    )
    usage = {r.name: r for r in exporter.only(ignoring).results}["tool_usage"]
    assert usage.score == 0.75
    # "Snowing, -3 C": the text itself, "Snowing" and -3; "C" is one letter.
    assert usage.explanation.endswith(
        "utilization 0.00 (none of the 3 values of the tool results found in the answer)."
    )


async def test_tool_usage_is_a_check_of_success_with_require_tools_only(tmp_path):
    dataset = """
cases:
  - id: oslo-trip
    turns: [{message: "What's the weather in Oslo?"}]
    expected_tool_calls: [{tool: get_weather, turn: 0, parameters: [{name: city, value: Oslo}]}]
"""
    ignoring = turn(new_trace_id(), "What's the weather in Oslo?", "I can't check the weather now.", OSLO_WEATHER)
    for require_tools, score, explanation in (
        (True, 0.0, "Failed: every turn's tool usage at tool_threshold"),
        (False, 1.0, "Every ground-truth check passed: every expected tool call made"),
    ):
        path = tmp_path / "suite.yaml"
        path.write_text(dataset)
        config = GroundTruthConfig.model_validate({"dataset": str(path), "require_tools": require_tools})
        processor = GroundTruth("ground_truth", config)
        exporter = MemoryExporter()
        pipeline = Pipeline(
            Assembler(PipelineSettings(trace_wait=1.0)), [("ground_truth", processor)], [exporter], clock=lambda: 5.0
        )
        await processor.start()
        await pipeline.start()
        MemoryReceiver(pipeline.intake).send(request_of(ignoring, resource_attributes={"eval.case.id": "oslo-trip"}))
        await pipeline.drain(time.monotonic() + 10)
        [carrier] = exporter.named(SESSION_SPAN_NAME)
        success = {r.name: r for r in carrier.results}["success"]
        assert (success.score, success.explanation) == (score, explanation)
