"""`{expected_output}` in a judge metric of your own: the dataset's expected response of
the trace's turn in the data block, a trace without one skipped without a call, and the
config's problems by key path.

The judge is scripted: its answers show the plumbing, not any judge's quality."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from spanscore.core.result import MetricResult
from spanscore.core.session import Session, TraceSummary
from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from spanscore.processors.judge_metrics.prompts import TRACE_CLOSE, TRACE_OPEN
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.agent_spans import make_span
from tests.support.rag_trace import CHAIN, kind, traces_of
from tests.support.scripted_judge import ScriptedJudge
from tests.support.spans import request_of

JUDGE = {"model": "judge-test", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}
BUILT_IN = METRIC_NAMES
OFF = {name: {"enabled": False} for name in BUILT_IN}
SUITE = """\
cases:
  - id: oslo
    turns:
      - message: What's the weather in Oslo?
        expected_response: Snowing, -3C
      - message: And tomorrow?
      - message: What should I wear?
        expected_response: A warm coat
"""
PROMPT = "Does the answer say what the expected output says?\n{output}\n{expected_output}"


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE, encoding="utf-8")
    return str(path)


def processor(suite: str, prompt: str = PROMPT) -> tuple[JudgeMetrics, ScriptedJudge]:
    config = JudgeMetricsConfig.model_validate(
        {"judge": JUDGE, "dataset": suite, "metrics": {**OFF, "matches": {"prompt": prompt, "output": "binary"}}}
    )
    judging = JudgeMetrics("judge_metrics", config)
    judging.judge = judge = ScriptedJudge({"matches": {"reason": "same", "pass": True}})
    return judging, judge


def trace(user_input: str, output: str, case_id: str | None = None):
    attributes = kind(CHAIN, **{"input.value": user_input, "output.value": output})
    if case_id is not None:
        attributes["eval.case.id"] = case_id
    [one] = traces_of(request_of([make_span("agent", attributes)]))
    return one


def test_the_expected_output_goes_inside_the_delimiters_and_the_prompt_points_at_it(suite):
    judging, judge = processor(suite)
    outputs = asyncio.run(judging.process_trace(trace("What's the weather in Oslo?", "It snows."), None))
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    assert (result.name, result.score) == ("matches", 1.0)
    [request] = judge.calls("matches")
    block, instructions = request.user.split(f"\n{TRACE_CLOSE}\n\n")
    assert block == f"{TRACE_OPEN}\noutput: It snows.\nexpected_output: Snowing, -3C"
    assert instructions.startswith(
        "Does the answer say what the expected output says?\n[output: see trace_data above]\n"
        "[expected_output: see trace_data above]\n"
    )


def test_a_trace_without_an_expected_output_is_skipped_with_the_reason_and_no_call(suite):
    judging, judge = processor(suite)
    outputs = asyncio.run(judging.process_trace(trace("Hello", "Hi"), None))
    assert (
        SpanAttribute(
            "eval.matches.skipped",
            "the trace joins no case of the dataset: no eval.case.id, and its first user message starts no case",
        )
        in outputs
    )
    assert not [o for o in outputs if isinstance(o, MetricResult)]
    assert judge.requests == []


def test_each_turn_of_a_session_is_judged_against_its_own_expected_response(suite):
    judging, judge = processor(suite)
    assert judging.uses_sessions
    session = Session("s", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    skipped = []
    for user, answer in [("Weather?", "Snow."), ("And tomorrow?", "Sun."), ("What should I wear?", "A coat.")]:
        one = trace(user, answer, case_id="oslo")
        outputs = asyncio.run(judging.process_trace(one, session))
        skipped += [o.value for o in outputs if isinstance(o, SpanAttribute) and o.key == "eval.matches.skipped"]
        session.traces.append(TraceSummary.of(one))  # as the pipeline does after the processors
    assert skipped == ["case oslo turn 1 has no expected_response"]
    blocks = [request.user.split(f"\n{TRACE_CLOSE}", 1)[0] for request in judge.calls("matches")]
    assert blocks == [
        f"{TRACE_OPEN}\noutput: Snow.\nexpected_output: Snowing, -3C",
        f"{TRACE_OPEN}\noutput: A coat.\nexpected_output: A warm coat",
    ]


def test_metrics_without_the_placeholder_need_no_dataset_and_are_judged_on_every_trace(suite):
    judging, judge = processor(suite, prompt="Polite?\n{output}")
    assert judging.expected is None and not judging.uses_sessions
    outputs = asyncio.run(judging.process_trace(trace("Hello", "Hi"), None))
    assert [o.score for o in outputs if isinstance(o, MetricResult)] == [1.0]


def test_the_revision_follows_the_dataset(suite, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(SUITE.replace("A warm coat", "A raincoat"), encoding="utf-8")

    def revision(dataset: str, prompt: str = PROMPT) -> str:
        config = JudgeMetricsConfig.model_validate(
            {"judge": JUDGE, "dataset": dataset, "metrics": {"matches": {"prompt": prompt, "output": "binary"}}}
        )
        return JudgeMetrics("judge_metrics", config).provenance("matches").revision

    assert revision(suite) == revision(suite)
    assert revision(suite) != revision(str(other))
    assert revision(suite, "Polite? {output}") == revision(str(other), "Polite? {output}")


def errors(config: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        JudgeMetricsConfig.model_validate(config)
    return {".".join(map(str, e["loc"])): e["msg"] for e in info.value.errors()}


def test_the_placeholder_without_a_dataset_or_on_a_span_is_an_error_at_the_prompt(suite):
    found = errors({"metrics": {"matches": {"prompt": PROMPT, "output": "binary"}}})
    assert found == {
        "metrics.matches.prompt": "Value error, {expected_output} is the answer a suite's dataset expects: give "
        "judge_metrics a dataset (an eval suite's cases, as ground_truth reads them)"
    }
    found = errors({"dataset": suite, "metrics": {"matches": {"prompt": PROMPT, "output": "binary", "on": "llm"}}})
    assert list(found) == ["metrics.matches.prompt"]
    assert "{expected_output} cannot be filled on: llm" in found["metrics.matches.prompt"]


def test_a_bad_dataset_is_reported_once_at_its_key(tmp_path):
    missing = tmp_path / "missing.yaml"
    found = errors({"dataset": str(missing), "metrics": {"matches": {"prompt": PROMPT, "output": "binary"}}})
    assert list(found) == ["dataset"]
    assert found["dataset"].startswith(f"Value error, {missing} is invalid:\n    {missing}: cannot read: ")


def test_in_combined_mode_a_metric_reading_the_expected_output_keeps_its_own_call(suite):
    config = JudgeMetricsConfig.model_validate(
        {
            "judge": JUDGE,
            "mode": "combined",
            "dataset": suite,
            "metrics": {
                **OFF,
                "matches": {"prompt": PROMPT, "output": "binary"},
                "polite": {"prompt": "Polite?\n{output}", "output": "binary"},
            },
        }
    )
    judging = JudgeMetrics("judge_metrics", config)
    assert judging.plan is not None and judging.plan.names == ("polite",)  # joined: the combined call
    assert judging.own is not None and [m.name for m, _ in judging.own.metrics] == ["matches"]
    judging.judge = judge = ScriptedJudge(
        {"matches": {"reason": "same", "pass": True}, "combined": {"polite": {"reason": "kind", "pass": False}}}
    )
    outputs = asyncio.run(judging.process_trace(trace("What's the weather in Oslo?", "It snows."), None))
    assert sorted(r.schema_name for r in judge.requests) == ["combined", "matches"]
    [own] = judge.calls("matches")
    assert own.user.split(f"\n{TRACE_CLOSE}", 1)[0] == f"{TRACE_OPEN}\noutput: It snows.\nexpected_output: Snowing, -3C"
    assert "expected_output" not in judge.calls("combined")[0].user
    scores = {o.name: o.score for o in outputs if isinstance(o, MetricResult)}
    assert scores == {"matches": 1.0, "polite": 0.0}

    # A trace with no expected output: the metric is skipped without a call, the combined call still made.
    judge.requests.clear()
    outputs = asyncio.run(judging.process_trace(trace("Hello", "Hi"), None))
    assert [r.schema_name for r in judge.requests] == ["combined"]
    assert any(isinstance(o, SpanAttribute) and o.key == "eval.matches.skipped" for o in outputs)
    assert {o.name for o in outputs if isinstance(o, MetricResult)} == {"polite"}


def test_a_session_target_cannot_fill_the_expected_output_even_with_a_dataset(suite):
    found = errors(
        {"dataset": suite, "metrics": {"matches": {"prompt": "{steps}\n{expected_output}", "output": "binary",
                                                   "on": "session"}}}
    )  # fmt: skip
    assert list(found) == ["metrics.matches.prompt"]
    assert "{expected_output} cannot be filled on: session" in found["metrics.matches.prompt"]
