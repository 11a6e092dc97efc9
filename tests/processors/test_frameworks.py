"""Conformance: what spanscore reads out of real agent frameworks' spans.

Every capture in tests/fixtures/spans/frameworks/ (made by
tests/fixtures/frameworks/capture.py, with the versions in versions.json) is one
two-turn session of one framework. In the weather captures, replayed the way the
collector sees it — assembled into traces, the session id found as the assembler finds
it — each turn's normalized view must show the whole run: the question, the final
answer, the one `get_weather` call with its arguments and result, the LLM steps (the
first asking for the tool, the last shown its result and answering), the session and
the agent's name. The docs_qa captures (the retrieval-augmented app of examples/agents)
are checked on their raw spans: each run's RETRIEVER span with the passages it
returned, and the LLM span after it, shown those passages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from tests.fixtures.frameworks import docs_qa
from tests.fixtures.frameworks.capture import FIXTURES, discover
from tests.fixtures.frameworks.weather import (
    AGENT_NAME,
    CITIES,
    REPORTS,
    SESSION_ID,
    TOOL_NAME,
    TURNS,
    answer_for,
)
from tests.support.otlp_json import read_requests

CAPTURES = discover()
WEATHER = sorted(name for name, capture in CAPTURES.items() if capture.scenario == "weather")
DOCS_QA = sorted(name for name, capture in CAPTURES.items() if capture.scenario == "docs_qa")
VERSIONS = json.loads((FIXTURES / "versions.json").read_text())


def replay(path: Path) -> list[AgentTrace]:
    """The normalized views of the file's agent traces (those the collector scores), in
    the order their roots started."""
    assembler = Assembler(PipelineSettings())
    for request in read_requests(path):
        assembler.add(request, now=0.0)
    traces = sorted(assembler.pop_all(), key=lambda trace: trace.start_time_unix_nano)
    views = [agent_trace_of(trace) for trace in traces]
    return [view for view in views if view.recognized]


def test_every_capture_has_a_fixture_and_its_versions():
    assert sorted(CAPTURES) == sorted(p.stem for p in FIXTURES.glob("*.jsonl"))
    assert sorted(CAPTURES) == sorted(VERSIONS)


@pytest.mark.parametrize("name", WEATHER)
def test_each_turn_reads_as_the_agent_ran_it(name):
    expect = CAPTURES[name].expect
    turns = replay(FIXTURES / f"{name}.jsonl")
    assert [t.user_input for t in turns] == list(TURNS)
    assert [t.final_output for t in turns] == [answer_for(city) for city in CITIES]
    for turn, city in zip(turns, CITIES):
        assert turn.session_id == SESSION_ID
        assert turn.agent_name == expect.get("agent_name", AGENT_NAME)
        assert [(s.name, s.arguments, s.result, s.error) for s in turn.tool_steps] == [
            (TOOL_NAME, {"city": city}, REPORTS[city], None)
        ]
        llm = turn.llm_steps
        assert len(llm) == expect.get("llm_steps", 2)
        # The first call asks for the tool; the last is shown its result and answers,
        # as text or through the framework's answer tool (smolagents' final_answer).
        assert [(call.name, call.arguments) for call in llm[0].tool_calls] == [(TOOL_NAME, {"city": city})]
        assert any(m.role == "tool" and REPORTS[city] in m.content for m in llm[-1].input_messages)
        answer_tool = expect.get("answer_tool")
        if answer_tool:
            assert [(c.name, c.arguments) for c in llm[-1].tool_calls] == [(answer_tool, {"answer": answer_for(city)})]
        else:
            assert (llm[-1].result or "").strip() == answer_for(city)


@pytest.mark.parametrize("name", DOCS_QA)
def test_each_docs_qa_run_recorded_its_retrieval_before_its_model_call(name):
    spans = [
        span
        for request in read_requests(FIXTURES / f"{name}.jsonl")
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    roots = sorted((s for s in spans if not s.parent_span_id), key=lambda s: s.start_time_unix_nano)
    assert len(roots) == len(docs_qa.TURNS)
    for root, turn in zip(roots, docs_qa.TURNS):
        run = {s.span_id: attributes_to_dict(s.attributes) for s in spans if s.trace_id == root.trace_id}
        assert run[root.span_id]["input.value"] == turn.question
        assert run[root.span_id]["output.value"] == turn.answer
        [retriever] = [s for s in spans if run.get(s.span_id, {}).get("openinference.span.kind") == "RETRIEVER"]
        [llm] = [s for s in spans if run.get(s.span_id, {}).get("openinference.span.kind") == "LLM"]
        passages = [value for key, value in run[retriever.span_id].items() if key.endswith(".document.content")]
        assert len(passages) == 2
        assert sum(turn.evidence in passage for passage in passages) == 1
        prompt = run[llm.span_id]["llm.input_messages.0.message.content"]
        assert all(passage in prompt for passage in passages)
        assert run[llm.span_id]["llm.output_messages.0.message.content"] == turn.answer
        assert llm.start_time_unix_nano >= retriever.end_time_unix_nano
