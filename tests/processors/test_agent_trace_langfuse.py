"""Langfuse conventions (`langfuse.observation.*`, `langfuse.trace.*`)."""

from spanscore.processors.agent_trace import build_agent_trace
from tests.support.agent_spans import TRACE_ID, make_span, with_resource


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
