"""OpenLLMetry conventions: opentelemetry-instrumentation-openai plus Traceloop entity spans."""

from tests.support.agent_fixtures import attribute_values, load_spans, load_trace


def test_decorator_input_args_and_kwargs_are_unwrapped():
    _, spans = load_spans("openllmetry")
    inputs = attribute_values(spans, "traceloop.entity.input")
    assert '{"args": [], "kwargs": {"city": "Paris"}}' in inputs
    trace = load_trace("openllmetry")
    assert trace.tool_steps[0].arguments == {"city": "Paris"}
    assert trace.user_input == "What's the weather in Paris?"


def test_json_encoded_entity_output_is_decoded_to_text():
    _, spans = load_spans("openllmetry")
    assert '"Sunny, 22 C"' in attribute_values(spans, "traceloop.entity.output")
    assert load_trace("openllmetry").tool_steps[0].result == "Sunny, 22 C"
