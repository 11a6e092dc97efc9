"""Conformance: what spanscore reads out of real agent frameworks' spans.

Every capture in tests/fixtures/spans/frameworks/ (made by
tests/fixtures/frameworks/capture.py, with the versions in versions.json) is one
two-turn session of one framework. In the weather captures, replayed the way the
collector sees it — assembled into traces, the session id found as the assembler finds
it — each turn's normalized view must show the whole run: the question, the final
answer, the one `get_weather` call with its arguments and result, the LLM steps (the
first asking for the tool, the last shown its result and answering), the session and
the agent's name. In the retrieval-augmented captures (docs_qa: the app of examples/agents
on several frameworks and instrumentations; rag_chatbot: the shop assistant of
examples/rag-chatbot.json) each question's run must read as a retrieval step (its query
and the passages it returned, as far as the instrumentation records them) followed by
the model call shown those passages, whose answer rag_metrics scores for faithfulness on
the model call's span: pass for the scenario's faithful answer, fail for the other.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import AgentTrace, agent_trace_of
from spanscore.processors.embedders.static import StaticEmbedder
from spanscore.processors.rag_metrics import FAITHFULNESS, RagMetrics, RagMetricsConfig
from tests.fixtures.frameworks import docs_qa, rag_chatbot
from tests.fixtures.frameworks.capture import FIXTURES, ROOT, discover, example_text
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
# scenario -> its turns and its passages (id, source, text)
RAG_SCENARIOS = {
    "docs_qa": (docs_qa.TURNS, docs_qa.example_passages()),
    "rag_chatbot": (rag_chatbot.TURNS, rag_chatbot.PASSAGES),
}
RAG = sorted(name for name, capture in CAPTURES.items() if capture.scenario in RAG_SCENARIOS)
VERSIONS = json.loads((FIXTURES / "versions.json").read_text())


def replay(path: Path) -> list[AgentTrace]:
    """The normalized views of the file's agent traces (those the collector scores), in
    the order their roots started."""
    views = [agent_trace_of(trace) for trace in traces_of(path)]
    return [view for view in views if view.recognized]


def traces_of(path: Path) -> list:
    """The file's spans assembled into traces as the collector assembles them, in the order their roots started."""
    assembler = Assembler(PipelineSettings())
    for request in read_requests(path):
        assembler.add(request, now=0.0)
    return sorted(assembler.pop_all(), key=lambda trace: trace.start_time_unix_nano)


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


def rag_runs(name: str) -> list[AgentTrace]:
    """The app's question runs, without the traces its index building made (LlamaIndex's)."""
    return [view for view in replay(FIXTURES / f"{name}.jsonl") if view.retrieval_steps]


@pytest.mark.parametrize("name", RAG)
def test_each_rag_run_reads_as_retrieval_then_the_model_shown_its_passages(name):
    expect = CAPTURES[name].expect
    turns, passages = RAG_SCENARIOS[CAPTURES[name].scenario]
    texts, ids = {text for _, _, text in passages}, {i for i, _, _ in passages}
    runs = rag_runs(name)
    assert [run.user_input for run in runs] == [turn.question for turn in turns]
    assert len({run.session_id for run in runs}) == 1 and runs[0].session_id
    if "session_id" in expect:
        assert runs[0].session_id == expect["session_id"]
    for run, turn in zip(runs, turns):
        assert run.final_output == turn.answer
        assert [step.kind for step in run.steps] == ["retrieval", "llm"]
        [retrieval] = run.retrieval_steps
        [llm] = run.llm_steps
        assert retrieval.end_time_unix_nano <= llm.start_time_unix_nano
        assert retrieval.query == expect.get("query", turn.question)
        assert (retrieval.document_count, len(retrieval.documents)) == (expect.get("documents", 2),) * 2
        if expect.get("contents", True):
            assert all(d.content in texts and d.content_chars == len(d.content) for d in retrieval.documents)
            assert sum(turn.evidence in d.content for d in retrieval.documents) == (1 if retrieval.documents else 0)
        else:  # ids and scores only
            assert all(d.id in ids and d.score is not None and not d.content for d in retrieval.documents)
        prompt = " ".join([run.system_prompt or "", *(m.content for m in llm.input_messages)])
        assert turn.evidence in prompt and all(d.content in prompt for d in retrieval.documents)
        assert (llm.result or "").strip() == turn.answer


@pytest.mark.parametrize("name", RAG)
def test_each_rag_answer_is_scored_for_faithfulness_on_its_model_span(name):
    turns, _ = RAG_SCENARIOS[CAPTURES[name].scenario]
    runs = {run.trace_id: run for run in rag_runs(name)}
    traces = [trace for trace in traces_of(FIXTURES / f"{name}.jsonl") if trace.trace_id.hex() in runs]
    processor = RagMetrics("rag_metrics", RagMetricsConfig())
    processor.held.embedder = StaticEmbedder()
    outputs = asyncio.run(processor.process_batch([(trace, None) for trace in traces]))
    scores = {}
    for trace, results, turn in zip(traces, outputs, turns):
        assert not isinstance(results, BaseException), results
        run = runs[trace.trace_id.hex()]
        assert run.user_input == turn.question
        faithfulness = [r for r in results if r.name == FAITHFULNESS]
        if not any(d.content for d in run.retrieval_steps[0].documents):
            assert faithfulness == []  # no document text recorded: nothing to hold the answer to
            continue
        [result] = faithfulness
        assert result.span_id == run.llm_steps[0].span_id
        assert result.passed == turn.faithful
        scores[turn.faithful] = result.score
    expect = CAPTURES[name].expect
    if expect.get("documents", 2) and expect.get("contents", True):
        assert sorted(scores) == [False, True] and scores[True] > scores[False]


def test_the_rag_chatbot_example_is_its_recorded_capture():
    capture = CAPTURES["rag_chatbot"]
    assert capture.example == ROOT / "examples" / "rag-chatbot.json"
    assert capture.example.read_text(encoding="utf-8") == example_text(read_requests(FIXTURES / "rag_chatbot.jsonl"))
