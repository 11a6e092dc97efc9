"""OTel GenAI conventions, from opentelemetry-instrumentation-openai-v2 spans."""

from tests.support.agent_fixtures import AGENT_NAME, attribute_values, load_spans, load_trace


def test_latest_semconv_reads_tool_call_ids_from_execute_tool_spans():
    trace = load_trace("genai_v2_latest")
    [tool] = trace.tool_steps
    assert tool.tool_call_id is not None
    assert tool.tool_call_id == trace.llm_steps[0].tool_calls[0].id


def test_latest_semconv_llm_steps_keep_their_input_messages():
    trace = load_trace("genai_v2_latest")
    first, second = trace.llm_steps
    assert [m.role for m in first.input_messages] == ["system", "user"]
    assert [m.role for m in second.input_messages] == ["system", "user", "assistant", "tool"]
    assert second.input_messages[-1].content == "Sunny, 22 C"
    assert second.input_messages[-1].tool_call_id == first.tool_calls[0].id


def test_agent_name_is_on_the_agent_span():
    _, spans = load_spans("genai_v2_latest")
    assert attribute_values(spans, "gen_ai.agent.name") == {AGENT_NAME}


def test_session_id_from_the_collector_is_passed_through():
    assert load_trace("genai_v2_latest", session_id="from-collector").session_id == "from-collector"
    assert load_trace("genai_v2_latest").session_id is None


def test_without_content_capture_the_llm_steps_hold_no_messages_and_the_tools_no_parameters():
    # The run itself is read from the agent and execute_tool spans (test_agent_trace_conventions.py).
    trace = load_trace("genai_v2")
    assert all(step.input_messages == [] for step in trace.llm_steps)
    assert trace.available_tools[0].parameters is None
