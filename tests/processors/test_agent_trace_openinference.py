"""OpenInference conventions, from openinference-instrumentation-openai spans."""

from tests.support.agent_fixtures import (
    SESSION_ID,
    USER_ID,
    assert_weather_run,
    attribute_values,
    load_spans,
    load_trace,
)


def test_openinference_trace_normalizes_to_the_weather_run():
    trace = load_trace("openinference")
    assert_weather_run(trace)
    assert trace.conventions == {"openinference"}
    assert trace.user_id == USER_ID


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


def test_session_and_user_come_from_using_session_and_using_user():
    _, spans = load_spans("openinference")
    assert attribute_values(spans, "session.id") == {SESSION_ID}
    assert attribute_values(spans, "user.id") == {USER_ID}
