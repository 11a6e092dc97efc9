"""OpenInference conventions, from openinference-instrumentation-openai spans."""

from tests.support.agent_fixtures import load_trace


def test_tool_span_input_value_is_the_arguments_and_output_value_the_result():
    trace = load_trace("openinference")
    [tool] = trace.tool_steps
    assert (tool.name, tool.arguments, tool.result) == ("get_weather", {"city": "Paris"}, "Sunny, 22 C")
    assert tool.convention == "openinference"


def test_tool_call_id_is_recovered_from_the_requesting_llm_call():
    trace = load_trace("openinference")
    assert trace.tool_steps[0].tool_call_id == trace.llm_steps[0].tool_calls[0].id


def test_flattened_input_messages_are_rebuilt_with_tool_calls():
    trace = load_trace("openinference")
    second = trace.llm_steps[1]
    assistant = second.input_messages[2]
    assert assistant.role == "assistant"
    assert [(c.name, c.arguments) for c in assistant.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert second.input_messages[3].role == "tool"
