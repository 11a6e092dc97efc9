"""Odd, legacy and hand-made input: the normalizer degrades to missing fields, never raises."""

import json
import random

import pytest

from spanscore.processors.agent_trace import build as build_module
from spanscore.processors.agent_trace import build_agent_trace
from tests.support.agent_spans import TRACE_ID, make_span, with_resource


def build(*spans, session_id=None):
    return build_agent_trace(TRACE_ID, with_resource(*spans), session_id=session_id)


def test_no_spans_give_an_empty_trace():
    trace = build_agent_trace(TRACE_ID, [])
    assert trace.trace_id == TRACE_ID.hex()
    assert (trace.user_input, trace.final_output, trace.steps, trace.conventions) == ("", "", [], set())


def test_malformed_attributes_yield_missing_fields_not_exceptions():
    root = make_span(
        "invoke_agent",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": ["not", "a", "string"],
            "gen_ai.input.messages": "[{not json",
            "gen_ai.output.messages": 42,
            "gen_ai.tool.definitions": '{"name": 5}',
        },
        start=1,
    )
    llm = make_span(
        "chat",
        {
            "openinference.span.kind": 7,
            "llm.input_messages.0.message.role": ["array"],
            "llm.input_messages.x.message.content": "no index",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": {"deep": 1},
            "llm.tools.0.tool.json_schema": "{truncated",
            "input.value": b"\xff\xfe",
        },
        parent=root,
        start=2,
    )
    tool = make_span(
        "execute_tool",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.arguments": "{broken",
            "gen_ai.tool.call.result": {"nested": [1, 2]},
        },
        parent=root,
        start=3,
    )
    odd = make_span(
        "odd",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.input": "null",
            "langfuse.observation.type": None,
            "langfuse.observation.input": '{"args": 3}',
            "gen_ai.prompt.0.content": None,
            "gen_ai.completion": "{]",
        },
        parent=root,
        start=4,
        events=[("gen_ai.choice", {"message": "{oops"}), ("gen_ai.user.message", {})],
    )

    trace = build(root, llm, tool, odd)

    assert trace.agent_name is None
    assert trace.user_input == "[{not json"  # unparseable input is still the input, as text
    lookup = next(step for step in trace.tool_steps if step.name == "lookup")
    assert lookup.arguments == "{broken"
    assert json.loads(lookup.result) == {"nested": [1, 2]}
    assert trace.available_tools[0].name == "lookup"


def test_structured_attribute_values_read_like_json_strings():
    as_json = make_span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {"x": 1}}],
                    }
                ]
            ),
        },
        start=1,
    )
    structured = make_span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}],
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {"x": 1}}]}
            ],
        },
        start=1,
    )
    a, b = build(as_json), build(structured)
    assert a.user_input == b.user_input == "hi"
    assert a.llm_steps[0].tool_calls == b.llm_steps[0].tool_calls
    assert b.llm_steps[0].tool_calls[0].arguments == {"x": 1}


def test_structured_tool_arguments_become_a_dict():
    tool = make_span(
        "execute_tool f",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "f",
            "gen_ai.tool.call.arguments": {"city": "Paris", "days": 2},
        },
    )
    assert build(tool).tool_steps[0].arguments == {"city": "Paris", "days": 2}


def _legacy_llm_spans():
    first = make_span(
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "Be brief.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Weather in Paris?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_9",
            "gen_ai.completion.0.tool_calls.0.name": "get_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
            "llm.request.functions.0.name": "get_weather",
            "llm.request.functions.0.description": "Weather for a city",
            "llm.request.functions.0.parameters": '{"type": "object", "properties": {"city": {"type": "string"}}}',
        },
        start=10,
        end=20,
    )
    second = make_span(
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Weather in Paris?",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.1.tool_calls.0.id": "call_9",
            "gen_ai.prompt.1.tool_calls.0.name": "get_weather",
            "gen_ai.prompt.1.tool_calls.0.arguments": '{"city": "Paris"}',
            "gen_ai.prompt.2.role": "tool",
            "gen_ai.prompt.2.tool_call_id": "call_9",
            "gen_ai.prompt.2.content": "Rain, 12 C",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "It is raining in Paris.",
        },
        start=30,
        end=40,
    )
    return first, second


def test_legacy_indexed_prompt_and_completion_attributes():
    trace = build(*_legacy_llm_spans())
    assert trace.conventions == {"genai_legacy", "genai", "openllmetry"}
    assert trace.user_input == "Weather in Paris?"
    assert trace.final_output == "It is raining in Paris."
    assert trace.system_prompt == "Be brief."
    assert [(t.name, t.description) for t in trace.available_tools] == [("get_weather", "Weather for a city")]
    assert trace.available_tools[0].parameters == {"type": "object", "properties": {"city": {"type": "string"}}}


def test_tool_calls_without_tool_spans_are_matched_to_tool_messages_by_id():
    first, second = _legacy_llm_spans()
    trace = build(first, second)
    assert [step.kind for step in trace.steps] == ["llm", "tool", "llm"]
    [tool] = trace.tool_steps
    assert (tool.name, tool.arguments, tool.result, tool.tool_call_id) == (
        "get_weather",
        {"city": "Paris"},
        "Rain, 12 C",
        "call_9",
    )
    assert tool.from_span is False
    assert tool.span_id == first.span_id.hex()


def test_unanswered_tool_call_without_a_span_has_no_result():
    first, _ = _legacy_llm_spans()
    [tool] = build(first).tool_steps
    assert tool.result is None and tool.name == "get_weather"


def test_legacy_message_events_on_the_span():
    llm = make_span(
        "chat gpt-4o",
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
        events=[
            ("gen_ai.system.message", {"gen_ai.event.content": json.dumps({"content": "Be brief."})}),
            ("gen_ai.user.message", {"content": "Weather in Rome?"}),
            (
                "gen_ai.choice",
                {
                    "gen_ai.event.content": json.dumps(
                        {
                            "index": 0,
                            "finish_reason": "tool_calls",
                            "message": {
                                "role": "assistant",
                                "tool_calls": [
                                    {
                                        "id": "c7",
                                        "type": "function",
                                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                                    }
                                ],
                            },
                        }
                    )
                },
            ),
        ],
    )
    trace = build(llm)
    assert "genai_legacy" in trace.conventions
    assert trace.user_input == "Weather in Rome?"
    assert trace.system_prompt == "Be brief."
    assert [(c.id, c.name, c.arguments) for c in trace.llm_steps[0].tool_calls] == [
        ("c7", "get_weather", {"city": "Rome"})
    ]


def test_span_order_does_not_matter():
    agent = make_span("agent", {"openinference.span.kind": "AGENT", "input.value": "q", "output.value": "a"}, start=1)
    llm = make_span(
        "llm",
        {
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "a",
        },
        parent=agent,
        start=2,
    )
    tool = make_span(
        "t", {"openinference.span.kind": "TOOL", "tool.name": "t", "input.value": "{}"}, parent=agent, start=3
    )
    spans = [agent, llm, tool]
    expected = build(*spans)
    for seed in range(5):
        random.Random(seed).shuffle(spans)
        assert build(*spans) == expected
    assert [s.kind for s in expected.steps] == ["llm", "tool"]


def test_llm_span_nested_in_an_llm_span_is_one_call():
    outer = make_span(
        "response",
        {
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "done",
        },
        start=1,
        end=100,
    )
    inner = make_span("chat gpt", {"gen_ai.operation.name": "chat"}, parent=outer, start=2, end=90)
    trace = build(outer, inner)
    assert [step.span_id for step in trace.steps] == [outer.span_id.hex()]


def test_an_llm_span_with_only_a_template_and_the_answer_yields_to_the_call_inside():
    # LlamaIndex's query engine: `predict` (template and answer) around `chat` (messages, usage).
    predict = make_span(
        "OpenAILike.predict",
        {
            "openinference.span.kind": "LLM",
            "llm.prompt_template.template": "Context: {context_str}\nQuery: {query_str}",
            "output.value": "30 days.",
        },
        start=1,
        end=100,
    )
    chat = make_span(
        "OpenAILike.chat",
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Context: Returns within 30 days.\nQuery: How long?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "30 days.",
            "llm.token_count.prompt": 12,
        },
        parent=predict,
        start=2,
        end=90,
    )
    [step] = build(predict, chat).steps
    assert step.span_id == chat.span_id.hex()
    assert [m.content for m in step.input_messages] == ["Context: Returns within 30 days.\nQuery: How long?"]
    assert step.result == "30 days."


def test_failed_tool_span_records_the_exception():
    tool = make_span(
        "execute_tool f",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f"},
        error="boom",
        events=[("exception", {"exception.type": "ValueError", "exception.message": "bad city"})],
    )
    assert build(tool).tool_steps[0].error == "ValueError: bad city"


def test_failed_agent_span_marks_the_trace():
    agent = make_span("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, error="deadline exceeded")
    assert build(agent).error == "deadline exceeded"


def test_parent_cycle_does_not_hang():
    a = make_span("a", {"openinference.span.kind": "CHAIN"}, id=b"\x00" * 7 + b"\x01", parent=b"\x00" * 7 + b"\x02")
    b = make_span("b", {"openinference.span.kind": "CHAIN"}, id=b"\x00" * 7 + b"\x02", parent=b"\x00" * 7 + b"\x01")
    assert build(a, b).steps == []


def test_reasoning_parts_and_reasoning_content_are_collected():
    genai = make_span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "reasoning", "content": "Need the forecast."},
                            {"type": "text", "content": "Sunny."},
                        ],
                    }
                ]
            ),
        },
        start=1,
    )
    chat = make_span(
        "llm",
        {
            "langfuse.observation.type": "generation",
            "langfuse.observation.output": json.dumps(
                {"role": "assistant", "content": "Done.", "reasoning_content": "Double-checked."}
            ),
        },
        start=2,
    )
    trace = build(genai, chat)
    assert trace.reasoning == ["Need the forecast.", "Double-checked."]
    assert trace.final_output == "Done."
    assert trace.llm_steps[0].result == "Sunny."


def test_user_input_is_the_latest_user_message_of_the_first_llm_call():
    llm = make_span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [
                    {"role": "user", "parts": [{"type": "text", "content": "Hi"}]},
                    {"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}]},
                    {"role": "user", "parts": [{"type": "text", "content": "Book a table for two."}]},
                ]
            ),
        },
    )
    assert build(llm).user_input == "Book a table for two."


def test_agent_input_wins_over_llm_messages():
    agent = make_span(
        "agent",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"question": "Q?"}}),
            "traceloop.entity.output": json.dumps({"answer": "A."}),
        },
        start=1,
    )
    llm = make_span(
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "prompt with Q? inside"}]}]
            ),
        },
        parent=agent,
        start=2,
    )
    trace = build(agent, llm)
    assert trace.user_input == "Q?"
    assert trace.final_output == "A."


def test_a_failing_adapter_does_not_cost_the_other_conventions(monkeypatch):
    def broken(view):
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(
        build_module,
        "ADAPTERS",
        (("openinference", broken),) + tuple(a for a in build_module.ADAPTERS if a[0] != "openinference"),
    )
    agent = make_span(
        "a",
        {"openinference.span.kind": "AGENT", "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
    )
    trace = build(agent)
    assert trace.agent_name == "helper"
    assert trace.conventions == {"genai"}


def test_an_internal_error_yields_an_empty_trace_not_an_exception(monkeypatch):
    def explode(*args):
        raise RuntimeError("bug")

    monkeypatch.setattr(build_module, "_build", explode)
    trace = build(make_span("x"), session_id="s1")
    assert (trace.trace_id, trace.session_id, trace.steps) == (TRACE_ID.hex(), "s1", [])


@pytest.mark.parametrize("value", ["", "   ", "[]", "{}", "null", "0", '"quoted"'])
def test_odd_input_values_never_raise(value):
    span = make_span(
        "s",
        {
            "openinference.span.kind": "AGENT",
            "input.value": value,
            "output.value": value,
            "gen_ai.input.messages": value,
            "langfuse.trace.input": value,
            "traceloop.entity.input": value,
            "gen_ai.tool.definitions": value,
        },
    )
    build(span)


@pytest.mark.parametrize("answer", ['{"answer": "yes", "sources": [1]}', "[1, 2]"])
def test_a_json_answer_is_the_step_s_text_not_an_empty_list_of_parts(answer):
    # Structured output: the model's text is a JSON value whose keys are no content parts.
    llm = make_span(
        "chat",
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Answer in JSON",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": answer,
        },
    )
    [step] = build(llm).llm_steps
    assert step.result == answer


def test_content_parts_in_json_still_read_as_their_text():
    llm = make_span(
        "chat",
        {
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": json.dumps([{"type": "text", "text": "hello"}]),
        },
    )
    [step] = build(llm).llm_steps
    assert step.result == "hello"
