"""Langfuse conventions (`langfuse.observation.*`, `langfuse.trace.*`)."""

from spanscore.processors.agent_trace import build_agent_trace
from tests.support.agent_fixtures import (
    SESSION_ID,
    USER_ID,
    assert_weather_run,
    attribute_values,
    load_spans,
    load_trace,
)
from tests.support.agent_spans import TRACE_ID, make_span, with_resource


def test_langfuse_trace_normalizes_to_the_weather_run():
    trace = load_trace("langfuse")
    assert_weather_run(trace)
    assert trace.conventions == {"langfuse"}
    assert trace.user_id == USER_ID


def test_session_and_user_are_langfuse_trace_attributes():
    _, spans = load_spans("langfuse")
    assert attribute_values(spans, "langfuse.session.id") == {SESSION_ID}
    assert attribute_values(spans, "langfuse.user.id") == {USER_ID}


def test_trace_input_and_output_win_over_observation_values():
    root = make_span(
        "handler",
        {
            "langfuse.observation.type": "span",
            "langfuse.observation.input": '{"args": [{"request": 1}], "kwargs": {}}',
            "langfuse.trace.input": '{"messages": [{"role": "user", "content": "hello there"}]}',
            "langfuse.trace.output": '{"role": "assistant", "content": "general kenobi"}',
        },
    )
    trace = build_agent_trace(TRACE_ID, with_resource(root))
    assert trace.user_input == "hello there"
    assert trace.final_output == "general kenobi"


def test_error_level_observation_is_a_failed_step():
    root = make_span("agent", {"langfuse.observation.type": "agent"}, start=1)
    tool = make_span(
        "lookup",
        {
            "langfuse.observation.type": "tool",
            "langfuse.observation.input": '{"q": "x"}',
            "langfuse.observation.level": "ERROR",
            "langfuse.observation.status_message": "upstream timeout",
        },
        parent=root,
        start=2,
    )
    trace = build_agent_trace(TRACE_ID, with_resource(root, tool))
    [step] = trace.tool_steps
    assert (step.name, step.arguments, step.error) == ("lookup", {"q": "x"}, "upstream timeout")
