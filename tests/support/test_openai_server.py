import json

import openai
import pytest

from tests.support.openai_server import ErrorReply, OpenAIServer, Reply, ToolCall

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def openai_server():
    with OpenAIServer() as server:
        yield server


def _client(server: OpenAIServer, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", **kwargs)


def test_weather_script_calls_the_tool_then_reports_its_result(openai_server):
    client = _client(openai_server)
    messages = [{"role": "user", "content": "What's the weather in Paris?"}]
    first = client.chat.completions.create(model="gpt-test", messages=messages, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens > 0

    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 22 C"},
    ]
    second = client.chat.completions.create(model="gpt-test", messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "The weather in Paris is: Sunny, 22 C"
    assert second.choices[0].finish_reason == "stop"


def test_streaming_chat_completion_delivers_text_tool_calls_and_usage(openai_server):
    client = _client(openai_server)
    openai_server.enqueue(
        Reply(content="thinking out loud", tool_calls=(ToolCall("get_weather", '{"city": "Paris"}'),))
    )
    stream = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, arguments, names, usage = "", "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                if call.function.name:
                    names.append(call.function.name)
                arguments += call.function.arguments or ""
    assert text == "thinking out loud"
    assert names == ["get_weather"]
    assert json.loads(arguments) == {"city": "Paris"}
    assert usage is not None and usage.total_tokens > 0


def test_responses_api_returns_function_call_then_text(openai_server):
    client = _client(openai_server)
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER_TOOL["function"]["parameters"]}
    first = client.responses.create(model="gpt-test", input="Weather in Paris?", tools=[tool])
    call = first.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    second = client.responses.create(
        model="gpt-test",
        tools=[tool],
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "Rain"},
        ],
    )
    assert second.output_text == "The weather in Paris is: Rain"


def test_streaming_responses_api_ends_with_the_completed_response(openai_server):
    client = _client(openai_server)
    openai_server.enqueue(Reply(content="done"))
    events = list(client.responses.create(model="gpt-test", input="hi", stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "done"


def test_embeddings_are_deterministic_unit_vectors(openai_server):
    client = _client(openai_server)
    first = client.embeddings.create(model="embed-test", input=["a", "b"])
    again = client.embeddings.create(model="embed-test", input="a", encoding_format="float")
    assert len(first.data) == 2
    assert first.data[0].embedding == pytest.approx(again.data[0].embedding, abs=1e-6)
    assert sum(x * x for x in first.data[0].embedding) == pytest.approx(1.0, abs=1e-5)
    assert first.data[0].embedding != first.data[1].embedding


def test_scripted_error_is_retried_by_the_client(openai_server):
    client = _client(openai_server, max_retries=1)
    openai_server.enqueue(ErrorReply(429, "slow down", headers={"Retry-After": "0"}), Reply(content="ok"))
    reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "ok"
    assert len(openai_server.requests_to("/chat/completions")) == 2


def test_requests_are_recorded_with_their_bodies(openai_server):
    client = _client(openai_server)
    openai_server.enqueue(Reply(content="ok"))
    client.chat.completions.create(
        model="judge-model",
        messages=[{"role": "system", "content": "be strict"}, {"role": "user", "content": "grade this"}],
    )
    recorded = openai_server.requests[-1]
    assert recorded.path == "/v1/chat/completions"
    assert recorded.body["model"] == "judge-model"
    assert [m["content"] for m in recorded.messages()] == ["be strict", "grade this"]
    assert recorded.headers["Authorization"] == "Bearer test-key"


def test_handler_callable_replaces_the_default_script():
    seen = []

    def handler(request):
        seen.append(request.body["model"])
        return Reply(content="custom")

    with OpenAIServer(handler=handler) as server:
        reply = _client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content == "custom"
    assert seen == ["m"]
