"""expected_output: which case a trace joins and the expected response of its turn, on
hand-made traces and a hand-written dataset, the turns counted as the pipeline appends them."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from spanscore.core.session import Session, TraceSummary
from spanscore.processors.eval_dataset import parse_dataset
from spanscore.processors.expected_output import DatasetSetting, ExpectedOutput, ExpectedOutputs
from tests.support.agent_spans import make_span
from tests.support.rag_trace import CHAIN, kind, traces_of
from tests.support.spans import request_of

DATASET = parse_dataset(
    """
cases:
  - id: oslo
    turns:
      - message: What's the weather in Oslo?
        expected_response: Snowing, -3C
      - message: And tomorrow?
      - message: What should I wear?
        expected_response: A warm coat
  - id: bergen
    user_instruction: Plan a day in Bergen
    subgoals: [{details: Names a museum}]
""",
    "yaml",
)


def trace(user_input: str, output: str = "ok", *, case_id: str | None = None, resource_case: str | None = None):
    attributes = kind(CHAIN, **{"input.value": user_input, "output.value": output})
    if case_id is not None:
        attributes["eval.case.id"] = case_id
    resource = {"eval.case.id": resource_case} if resource_case is not None else None
    [one] = traces_of(request_of([make_span("agent", attributes)], resource_attributes=resource))
    return one


def lookup(key: str = "eval.case.id") -> ExpectedOutputs:
    return ExpectedOutputs(DATASET, key, "checks.expected_output")


def test_joined_by_case_id_on_the_span_or_the_resource():
    found = lookup().of(trace("Anything at all", case_id="oslo"), None)
    assert found == ExpectedOutput("Snowing, -3C", "oslo", 0)
    assert found.source == "case oslo turn 0"
    assert lookup().of(trace("Anything at all", resource_case=" oslo "), None) == ExpectedOutput(
        "Snowing, -3C", "oslo", 0
    )


def test_a_case_key_of_your_own_is_read():
    one = trace("Anything")
    assert lookup("suite.case").of(one, None).startswith("the trace joins no case")
    attributes = kind(CHAIN, **{"input.value": "Anything", "output.value": "ok", "suite.case": "oslo"})
    [keyed] = traces_of(request_of([make_span("agent", attributes)]))
    assert lookup("suite.case").of(keyed, None) == ExpectedOutput("Snowing, -3C", "oslo", 0)


def test_joined_by_the_first_user_message_trimmed():
    assert lookup().of(trace("  What's the weather in Oslo?\n"), None) == ExpectedOutput("Snowing, -3C", "oslo", 0)


def test_a_trace_that_joins_no_case_says_why():
    assert lookup().of(trace("Hello there"), None) == (
        "the trace joins no case of the dataset: no eval.case.id, and its first user message starts no case"
    )
    assert lookup().of(trace("Hello", case_id="paris"), None) == (
        "the trace joins no case of the dataset: case id 'paris' is not in the dataset"
    )


def test_a_case_without_turns_or_a_turn_without_expected_response_has_none():
    assert lookup().of(trace("Plan a day in Bergen"), None) == (
        "case bergen scripts 0 turns; this trace is turn 0 (turns count from 0)"
    )


def scored(session: Session, one) -> None:
    """What the pipeline does once every processor ran on a trace of the session."""
    session.traces.append(TraceSummary.of(one))


def test_a_session_s_turns_each_get_their_own_expected_response():
    session = Session("s1", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    found = lookup()
    turns = [trace("What's the weather in Oslo?"), trace("And tomorrow?"), trace("What should I wear?"), trace("Bye")]
    answers = []
    for one in turns:
        answers.append(found.of(one, session))
        scored(session, one)
    assert answers == [
        ExpectedOutput("Snowing, -3C", "oslo", 0),
        "case oslo turn 1 has no expected_response",
        ExpectedOutput("A warm coat", "oslo", 2),
        "case oslo scripts 3 turns; this trace is turn 3 (turns count from 0)",
    ]
    # The join is kept per session and per processor: another key joins afresh.
    assert session.state["checks.expected_output"].case.id == "oslo"
    assert "judge.expected_output" not in session.state


def test_a_later_turn_is_not_joined_by_its_own_message():
    # The session's first trace was not seen here (a worker restarted): its second message
    # would join the wrong case, so only an id joins it.
    session = Session("s2", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    scored(session, trace("earlier"))
    assert lookup().of(trace("What's the weather in Oslo?"), session) == (
        "the trace joins no case of the dataset: no eval.case.id, and the session's first trace was not seen here"
    )
    other = Session("s3", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    scored(other, trace("earlier"))
    scored(other, trace("and later"))
    assert lookup().of(trace("What should I wear?", case_id="oslo"), other) == ExpectedOutput("A warm coat", "oslo", 2)


class Settings(BaseModel):
    dataset: DatasetSetting


def test_the_setting_loads_the_file_and_reports_its_problems_as_ground_truth_does(tmp_path):
    good = tmp_path / "suite.yaml"
    good.write_text("cases:\n  - id: a\n    turns: [{message: hi, expected_response: hello}]\n", encoding="utf-8")
    assert Settings(dataset=str(good)).dataset.loaded.by_id("a").turns[0].expected_response == "hello"
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases:\n  - id: a\n    turns: [{message: hi, expected_response: 3}]\n", encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        Settings(dataset=str(bad))
    [error] = info.value.errors()
    assert error["loc"] == ("dataset",)
    assert f"{bad} is invalid:\n    cases[0] (id a).turns[0].expected_response: " in error["msg"]
