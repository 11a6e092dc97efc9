"""OpenAI Agents SDK runs, recorded by openinference-instrumentation-openai-agents."""

from tests.support.agent_fixtures import AGENT_NAME, attribute_values, load_spans, load_trace


def test_agent_name_comes_from_the_agent_span_not_the_workflow_root():
    _, spans = load_spans("openai_agents")
    names = [span.name for span, _ in spans]
    assert "Agent workflow" in names
    assert attribute_values(spans, "agent.name") == {AGENT_NAME}
    assert load_trace("openai_agents").agent_name == AGENT_NAME


def test_user_input_and_final_output_fall_back_to_the_llm_calls():
    # The SDK's agent spans carry no input.value/output.value.
    _, spans = load_spans("openai_agents")
    assert attribute_values(spans, "openinference.span.kind") >= {"AGENT", "CHAIN", "LLM", "TOOL"}
    trace = load_trace("openai_agents")
    assert trace.user_input == "What's the weather in Paris?"
    assert trace.final_output == trace.llm_steps[-1].result


def test_responses_api_plan_text_next_to_the_function_call_is_reasoning():
    trace = load_trace("openai_agents")
    first = trace.llm_steps[0]
    assert first.result == "I will look up the current weather in Paris."
    assert first.reasoning == ["I will look up the current weather in Paris."]


def test_session_id_is_on_every_span():
    _, spans = load_spans("openai_agents")
    assert all(any(kv.key == "session.id" for kv in span.attributes) for span, _ in spans)
