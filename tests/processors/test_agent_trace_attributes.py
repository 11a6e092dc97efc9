"""SpanAttributes: lookups and prefix answers, which are kept per key tuple across spans."""

from spanscore.processors.agent_trace import attributes
from spanscore.processors.agent_trace.attributes import SpanAttributes
from tests.support.spans import kv


def attrs(**values):
    return SpanAttributes([kv(key.replace("__", "."), value) for key, value in values.items()])


def test_first_occurrence_of_a_key_wins():
    span = SpanAttributes([kv("a", "first"), kv("a", "second")])
    assert span.get("a") == "first"
    assert span.count_prefix("a") == 1


def test_text_stringifies_scalars_and_skips_structures_and_empties():
    span = attrs(a="", b=["x"], c=3, d="found", e=True)
    assert span.text("missing", "a", "b", "c") == "3"
    assert span.text("a", "d") == "found"
    assert span.text("e") is None


def test_prefix_answers_follow_each_span_keys():
    genai = attrs(gen_ai__operation__name="chat", gen_ai__prompt__0__content="hi")
    other = attrs(llm__input_messages__0__message__role="user", x="1")
    assert genai.count_prefix("gen_ai.") == 2
    assert genai.count_prefix(("gen_ai.prompt", "gen_ai.completion")) == 1
    assert not genai.has_prefix("llm.")
    assert other.has_prefix(("langfuse.", "llm."))
    assert other.with_prefix("llm.input_messages.") == {"0.message.role": "user"}
    assert other.nested("llm.input_messages.") == [{"message": {"role": "user"}}]
    assert other.nested("gen_ai.") is None


def test_spans_with_the_same_keys_share_answers_but_not_values():
    first, second = attrs(a__b="one"), attrs(a__b="two")
    assert first.with_prefix("a.") == {"b": "one"}
    assert second.with_prefix("a.") == {"b": "two"}


def test_keys_holding_newlines_or_prefix_lookalikes_are_answered_exactly():
    span = SpanAttributes([kv("x\nlangfuse.y", 1), kv("langfusex", 2), kv("gen_ai", 3)])
    assert not span.has_prefix("langfuse.")
    assert not span.has_prefix("gen_ai.")
    assert span.has_prefix("gen_ai")
    assert span.with_prefix("x\n") == {"langfuse.y": 1}


def test_the_table_of_key_tuples_is_bounded(monkeypatch):
    monkeypatch.setattr(attributes, "MAX_SHAPES", 3)
    monkeypatch.setattr(attributes, "_SHAPES", {})
    for i in range(10):
        span = SpanAttributes([kv(f"k{i}.x", i)])
        assert span.with_prefix(f"k{i}.") == {"x": i}
        assert len(attributes._SHAPES) <= 3
