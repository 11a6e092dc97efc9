"""The example agents in examples/agents/, run as a user would run them, against spanscore.

Each example runs as a subprocess with its framework's own instrumentation, its model
being the loopback OpenAI-protocol server (`weather_agent`: call get_weather for Paris,
then report the result) and its OTLP/HTTP exporter pointed at an in-process spanscore.
spanscore must assemble both turns as agent traces of one session, read the tool call
and the answer, and write its scores onto each root span and the session's carrier.

Which Python runs the examples: see tests/support/example_agents.py.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.embedders.static import StaticEmbedder
from spanscore.processors.metrics import coherence
from tests.support.example_agents import EXAMPLES, INHERITED, RUN_TIMEOUT_S, require_framework
from tests.support.openai_server import WEATHER_REPORT, OpenAIServer, weather_agent
from tests.support.recording_processor import RecordAgent
from tests.support.running import sink_config, wait_until

# The modules each example imports beyond the standard library.
REQUIRES = {
    "pydantic_ai_weather": ("pydantic_ai", "openai", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "langgraph_weather": (
        "langgraph.prebuilt",
        "langchain_openai",
        "openinference.instrumentation.langchain",
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
    ),
    "openai_agents_weather": (
        "agents",
        "openinference.instrumentation.openai_agents",
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
    ),
}
QUESTION = "What's the weather in Paris?"
FOLLOW_UP = "Should I take an umbrella?"
ANSWER = f"The weather in Paris is: {WEATHER_REPORT}"  # what `weather_agent` says, shown the tool's result
PROCESSORS = """\
  record_agent: {}
  embedding_metrics: {embedder: {type: static}}
  session_metrics: {}"""
README = EXAMPLES / "README.md"


def scores(span) -> dict:
    attributes = attributes_to_dict(span.attributes)
    return {key[len("eval.") :]: value for key, value in attributes.items() if key.startswith("eval.")}


@pytest.mark.parametrize("example", sorted(REQUIRES))
def test_example_agent_is_assembled_read_and_scored(example, sink, start_collector):
    python = require_framework(example, REQUIRES[example])
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, record_agent, embedding_metrics, session_metrics]",
            extra_processors=PROCESSORS,
            assembler="trace_wait: 200ms, session_idle: 1s",
        )
    )
    with OpenAIServer(handler=weather_agent) as server:
        environment = {key: os.environ[key] for key in INHERITED if key in os.environ}
        environment.update(
            {
                "OPENAI_BASE_URL": server.base_url,
                "OPENAI_API_KEY": "test-key",
                "OPENAI_MODEL": "gpt-test",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
            }
        )
        run = subprocess.run(
            [python, str(EXAMPLES / f"{example}.py")],
            check=False,
            env=environment,
            cwd=EXAMPLES,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        model_requests = len(server.requests)
    assert run.returncode == 0, f"{example} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
    # Turn 1 calls the tool, then answers; turn 2 answers from the history.
    assert model_requests == 3, run.stdout
    assert run.stdout.count(ANSWER) == 2, run.stdout
    session_id = run.stdout.split()[1]  # the example's first line: "session <id>"

    [recorder] = [p for _, p in collector.pipeline.processors if isinstance(p, RecordAgent)]
    assert wait_until(lambda: len([t for t in recorder.traces if t.recognized]) == 2, timeout_s=15), [
        (t.trace_id, t.conventions, t.user_input) for t in recorder.traces
    ]
    first, second = [t for t in recorder.traces if t.recognized]
    if first.user_input != QUESTION:
        first, second = second, first

    # What spanscore read: the question, the get_weather call and its result, the answer.
    assert first.user_input == QUESTION
    assert first.final_output.strip() == ANSWER
    assert first.agent_name == "weather_agent"
    assert [(s.name, s.arguments, s.result, s.error) for s in first.tool_steps] == [
        ("get_weather", {"city": "Paris"}, WEATHER_REPORT, None)
    ]
    assert [(c.name, c.arguments) for c in first.llm_steps[0].tool_calls] == [("get_weather", {"city": "Paris"})]
    assert second.user_input == FOLLOW_UP
    assert second.final_output.strip() == ANSWER
    assert second.tool_steps == []
    assert first.session_id == second.session_id == session_id

    # The scores on each turn's root span, as exported.
    assert wait_until(lambda: any(s.name == "evaluate_session" for s in sink.spans()), timeout_s=15)
    roots = {s.trace_id.hex(): s for s in sink.spans() if not s.parent_span_id}
    first_scores, second_scores = scores(roots[first.trace_id]), scores(roots[second.trace_id])
    for got in (first_scores, second_scores):
        for metric in ("coherence", "loop_detection"):
            assert 0.0 <= got[f"{metric}.score"] <= 1.0
            assert got[f"{metric}.label"] in ("pass", "fail")
            assert got[f"{metric}.explanation"]
    embedder = StaticEmbedder()
    for turn, got in ((first, first_scores), (second, second_scores)):
        assert got["coherence.score"] == coherence(turn.user_input, turn.final_output, embedder=embedder).score
    assert first_scores["coherence.label"] == "pass"  # the answer is about what was asked
    assert first_scores["loop_detection.score"] == 1.0  # nothing before it in the session
    # The scripted model gives turn 2 the same answer word for word: a loop.
    assert second_scores["loop_detection.score"] == pytest.approx(0.0, abs=1e-6)
    assert second_scores["loop_detection.label"] == "fail"

    # The session, closed after its idle time, scored on its carrier span.
    [carrier] = [s for s in sink.spans() if s.name == "evaluate_session"]
    carried = scores(carrier)
    assert attributes_to_dict(carrier.attributes)["session.id"] == session_id
    assert carried["session.trace_count"] == 2
    assert {link.trace_id.hex() for link in carrier.links} == {first.trace_id, second.trace_id}
    assert carried["agent_reliability.label"] == "fail"  # the loop
    assert carried["agent_consistency.explanation"] == "No evaluable traces."  # no judge here

    # examples/agents/README.md shows these scores, as spanscore prints them.
    shown = [
        ", ".join(f"{metric}={got[f'{metric}.score']:.2f} {got[f'{metric}.label']}" for metric in metrics)
        for got, metrics in (
            (first_scores, ("coherence", "loop_detection")),
            (second_scores, ("coherence", "loop_detection")),
            (carried, ("agent_reliability", "agent_consistency")),
        )
    ]
    assert readme_scores() == shown, shown


def readme_scores() -> list[str]:
    """The `scores: ...` of each `trace ...` line the README's sample shows."""
    lines = README.read_text(encoding="utf-8").splitlines()
    return [line.split(" scores: ", 1)[1] for line in lines if line.startswith("trace ") and " scores: " in line]
