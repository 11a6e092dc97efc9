"""The captured weather-agent fixtures and what every one of them must normalize to."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.attributes import find_attribute
from spanscore.processors.agent_trace import AgentTrace, build_agent_trace
from tests.support.otlp_json import read_requests, spans_by_trace

SPANS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "spans"

QUESTION = "What's the weather in Paris?"
WEATHER_REPORT = "Sunny, 22 C"
FINAL_ANSWER = "The weather in Paris is: Sunny, 22 C"
PLAN = "I will look up the current weather in Paris."
SYSTEM_PROMPT = "You are a weather assistant. Use the get_weather tool to answer."
AGENT_NAME = "weather_agent"
SESSION_ID = "weather-session-1"
USER_ID = "user-42"
TOOL_DESCRIPTION = "Get the current weather for a city."


def load_spans(name: str, directory: Path = SPANS_DIR) -> tuple[bytes, list[tuple[Span, Resource]]]:
    """The one trace recorded in `<directory>/<name>.jsonl`."""
    traces = spans_by_trace(read_requests(directory / f"{name}.jsonl"))
    assert len(traces) == 1, f"{name}: expected one trace, found {len(traces)}"
    return next(iter(traces.items()))


def load_trace(name: str, directory: Path = SPANS_DIR, session_id: str | None = None) -> AgentTrace:
    trace_id, spans = load_spans(name, directory)
    return build_agent_trace(trace_id, spans, session_id=session_id)


def attribute_values(spans: list[tuple[Span, Resource]], key: str) -> set:
    """Every value `key` takes across the spans (spans without it are skipped)."""
    values = set()
    for span, _ in spans:
        value = find_attribute(span.attributes, key)
        if value is not None:
            values.add(value)
    return values


def assert_weather_run(trace: AgentTrace, *, content_on_llm_spans: bool = True) -> None:
    """The normalized view every convention must give of the same weather-agent run."""
    assert trace.user_input == QUESTION
    assert trace.final_output == FINAL_ANSWER
    assert trace.agent_name == AGENT_NAME
    assert [step.kind for step in trace.steps] == ["llm", "tool", "llm"]

    [tool] = trace.tool_steps
    assert tool.name == "get_weather"
    assert tool.arguments == {"city": "Paris"}
    assert tool.result == WEATHER_REPORT
    assert tool.error is None
    assert tool.from_span

    assert [t.name for t in trace.available_tools] == ["get_weather"]
    assert trace.available_tools[0].description == TOOL_DESCRIPTION

    first, second = trace.llm_steps
    assert first.model == second.model == "gpt-test"
    if content_on_llm_spans:
        assert [(c.name, c.arguments) for c in first.tool_calls] == [("get_weather", {"city": "Paris"})]
        assert first.tool_calls[0].id == tool.tool_call_id
        assert second.result == FINAL_ANSWER
        assert second.tool_calls == []
        assert trace.reasoning == [PLAN]
        assert trace.system_prompt == SYSTEM_PROMPT
        parameters = trace.available_tools[0].parameters
        assert parameters["properties"]["city"]["type"] == "string"
        assert parameters["required"] == ["city"]
