"""What every instrumentation convention must give of the same weather-agent run, one
recording per convention in tests/fixtures/spans/; what a convention reads its own way is
tested in its test_agent_trace_<convention>.py."""

import pytest

from tests.support.agent_fixtures import (
    SESSION_ID,
    USER_ID,
    assert_weather_run,
    attribute_values,
    load_spans,
    load_trace,
)

# recording: (the conventions it is read as, whether its LLM spans hold the messages)
RUNS = {
    "genai_v2_latest": ({"genai"}, True),
    # CAPTURE_MESSAGE_CONTENT=true is not a content mode of the current instrumentation, so
    # its LLM spans hold no messages: the agent and execute_tool spans must suffice.
    "genai_v2": ({"genai"}, False),
    "langfuse": ({"langfuse"}, True),
    "openai_agents": ({"openinference"}, True),
    "openinference": ({"openinference"}, True),
    "openllmetry": ({"openllmetry", "genai"}, True),
}
# recording: the span attribute its instrumentation records the session in
SESSION_KEYS = {
    "genai_v2_latest": "gen_ai.conversation.id",
    "genai_v2": "gen_ai.conversation.id",
    "langfuse": "langfuse.session.id",
    "openai_agents": "session.id",
    "openinference": "session.id",
    "openllmetry": "traceloop.association.properties.session_id",
}
USER_KEYS = {"langfuse": "langfuse.user.id", "openinference": "user.id"}


@pytest.mark.parametrize("recording", RUNS)
def test_each_convention_normalizes_to_the_weather_run(recording):
    conventions, content_on_llm_spans = RUNS[recording]
    trace = load_trace(recording)
    assert_weather_run(trace, content_on_llm_spans=content_on_llm_spans)
    assert trace.conventions == conventions
    assert trace.user_id == USER_ID


@pytest.mark.parametrize("recording", SESSION_KEYS)
def test_the_session_is_the_convention_s_own_attribute(recording):
    _, spans = load_spans(recording)
    assert attribute_values(spans, SESSION_KEYS[recording]) == {SESSION_ID}


@pytest.mark.parametrize("recording", USER_KEYS)
def test_the_user_is_the_convention_s_own_attribute(recording):
    _, spans = load_spans(recording)
    assert attribute_values(spans, USER_KEYS[recording]) == {USER_ID}
