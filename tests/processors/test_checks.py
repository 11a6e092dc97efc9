"""checks: each rule on hand-made spans, what it says it found, which span it names, and
the config's problems by key path."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

import spanscore.processors.checks as checks_module
from spanscore.config.loader import ConfigError, parse_config
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.processors.checks import MAX_CHECKED_CHARS, Checks, ChecksConfig
from tests.support.agent_spans import make_span
from tests.support.rag_trace import traces_of
from tests.support.spans import request_of

ROOT, RETRIEVE, LLM, SEARCH, LOOKUP = (bytes(7) + bytes([n]) for n in range(1, 6))
ROOT_ID, RETRIEVE_ID, LLM_ID, SEARCH_ID, LOOKUP_ID = (span.hex() for span in (ROOT, RETRIEVE, LLM, SEARCH, LOOKUP))
SECOND = 1_000_000_000


def run_spans(output: str = "We will refund you. Write to bob@example.com", answer: str = '{"answer": "yes"}'):
    """A run: its root, a retrieval, a model call (900 tokens), a tool that took 2.5 s and one that failed."""
    root = make_span(
        "qa",
        {"openinference.span.kind": "CHAIN", "input.value": "Can I get a refund?", "output.value": output,
         "customer.tier": "gold", "order.total": 42},
        id=ROOT, start=0, end=3 * SECOND,
    )  # fmt: skip
    retrieve = make_span(
        "retrieve",
        {"openinference.span.kind": "RETRIEVER", "input.value": "refund policy",
         "retrieval.documents.0.document.content": "Refunds within 30 days.",
         "retrieval.documents.1.document.content": "Délais de remboursement : 30 jours."},
        id=RETRIEVE, parent=ROOT, start=10, end=60,
    )  # fmt: skip
    llm = make_span(
        "answer",
        {"openinference.span.kind": "LLM",
         "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "Can I get a refund?",
         "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": answer,
         "llm.token_count.prompt": 500, "llm.token_count.completion": 400},
        id=LLM, parent=ROOT, start=100, end=200,
    )  # fmt: skip
    search = make_span(
        "search",
        {"openinference.span.kind": "TOOL", "tool.name": "search", "input.value": '{"q": "refund"}',
         "output.value": "found 3"},
        id=SEARCH, parent=ROOT, start=300, end=300 + 5 * SECOND // 2,
    )  # fmt: skip
    lookup = make_span(
        "lookup",
        {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": "not json {"},
        id=LOOKUP, parent=ROOT, start=400, end=500, error="timeout after 30s",
    )  # fmt: skip
    return [root, retrieve, llm, search, lookup]


def check(metric: dict, spans=None) -> list[MetricResult]:
    """The results of one check named `rule` on a trace of `spans` (the run above by default)."""
    [trace] = traces_of(request_of(spans or run_spans()))
    config = ChecksConfig.model_validate({"metrics": {"rule": metric}})
    return list(asyncio.run(Checks("checks", config).process_trace(trace, None)))


def verdicts(results) -> list[tuple[str | None, float | None, str | None]]:
    return [(r.span_id, r.score, r.explanation) for r in results]


def test_not_regex_fails_on_the_root_quoting_the_match():
    [result] = check({"field": "output", "not_regex": "(?i)REFUND"})
    assert (result.span_id, result.score, result.threshold, result.passed, result.label) == (
        None, 0.0, 0.5, False, "fail"
    )  # fmt: skip
    assert result.explanation == "output matches /(?i)REFUND/ at character 8: refund"
    assert result.metadata == {"check": "not_regex"}
    [result] = check({"field": "input", "not_regex": "weather"})
    assert (result.score, result.explanation) == (1.0, "input (19 characters) has no match of /weather/")


def test_regex_on_each_span_of_a_kind_names_its_span():
    assert verdicts(check({"on": "tool", "field": "output", "regex": r"found \d"})) == [
        (SEARCH_ID, 1.0, r"output matches /found \d/ at character 0: found 3"),
        # lookup failed and recorded no result: no field, no result
    ]
    assert verdicts(check({"on": "retrieval", "field": "input", "regex": "policy$"})) == [
        (RETRIEVE_ID, 1.0, "input matches /policy$/ at character 7: policy"),
    ]


def test_unicode_text_is_matched_and_quoted_by_characters():
    [result] = check({"on": "retrieval", "field": "output", "regex": r"remboursement\s*:\s*\d+ jours"})
    assert (
        result.explanation
        == "output matches /remboursement\\s*:\\s*\\d+ jours/ at character 35: remboursement : 30 jours"
    )
    [result] = check({"field": "output", "regex": "日本"}, run_spans(output="答え：日本\u2028です"))
    assert (result.score, result.explanation) == (1.0, "output matches /日本/ at character 3: 日本")
    [result] = check({"field": "output", "not_regex": "日本.です"}, run_spans(output="答え：日本\u2028です"))
    assert result.explanation == "output matches /日本.です/ at character 3: 日本\\u2028です"  # never a raw line break


def test_context_is_the_documents_read_before_the_call_or_on_the_trace_all_of_them():
    assert verdicts(check({"on": "llm", "field": "context", "regex": "30 days"})) == [
        (LLM_ID, 1.0, "context matches /30 days/ at character 15: 30 days")
    ]
    [result] = check({"field": "context", "not_regex": "jours"})
    assert result.explanation == "context matches /jours/ at character 54: jours"


def test_attributes_of_the_span_are_read_as_text_and_a_missing_one_gives_no_result():
    [result] = check({"field": "attributes.customer.tier", "regex": "^gold$"})
    assert (result.score, result.explanation) == (1.0, "attributes.customer.tier matches /^gold$/ at character 0: gold")
    [result] = check({"field": "attributes.order.total", "regex": "^42$"})
    assert result.score == 1.0
    assert check({"field": "attributes.customer.region", "regex": "."}) == []
    assert check({"on": "tool", "field": "attributes.customer.tier", "regex": "."}) == []


def test_json_schema_passes_valid_json_and_says_why_the_rest_fails():
    schema = {"type": "object", "required": ["answer"], "properties": {"answer": {"enum": ["yes", "no"]}}}
    assert verdicts(check({"on": "llm", "field": "output", "json_schema": schema})) == [
        (LLM_ID, 1.0, "output is JSON satisfying the schema")
    ]
    [wrong] = check({"on": "llm", "field": "output", "json_schema": schema}, run_spans(answer='{"answer": "maybe"}'))
    assert (wrong.score, wrong.explanation) == (
        0.0, "output does not satisfy the schema: $.answer: \"maybe\" is not one of ['yes', 'no']"
    )  # fmt: skip
    [missing] = check({"on": "llm", "field": "output", "json_schema": schema}, run_spans(answer='{"reply": 1}'))
    assert missing.explanation == "output does not satisfy the schema: $: missing required 'answer'"
    assert verdicts(check({"on": "tool", "field": "input", "json_schema": {"type": "object"}})) == [
        (SEARCH_ID, 1.0, "input is JSON satisfying the schema"),
        (LOOKUP_ID, 0.0, "input is not JSON: Expecting value: line 1 column 1 (char 0)"),
    ]


def test_json_nested_past_the_parser_s_depth_fails_with_a_reason_not_an_error():
    deep = "[" * 50_000 + "]" * 50_000
    [result] = check({"field": "output", "json_schema": {"type": "array"}}, run_spans(output=deep))
    assert (result.score, result.error, result.explanation) == (
        0.0, None, "output is not JSON this parser reads: nested too deeply"
    )  # fmt: skip


def test_no_pii_says_which_kinds_it_found_and_never_the_secret():
    key = "sk-" + "a1B2" * 8
    output = f"Mail ann@example.com or bob@exämple.de; the key is {key}"
    [result] = check({"field": "output", "no_pii": True}, run_spans(output=output))
    assert (result.score, result.explanation) == (0.0, "output holds 2 e-mail addresses, 1 API key")
    assert key not in result.model_dump_json() and "ann@" not in result.model_dump_json()
    [clean] = check({"field": "output", "no_pii": True}, run_spans(output="No secrets here: token_count=3"))
    assert (clean.score, clean.explanation) == (
        1.0, "output (30 characters) holds no e-mail address, card number, API key, token or secret"
    )  # fmt: skip


def test_no_pii_finds_card_numbers_and_keeps_other_digit_runs():
    output = "Charged 4111 1111 1111 1111 and 3782-822463-10005 for order 4111111111111112 at 2026-11-27T21:29:29Z"
    [result] = check({"field": "output", "no_pii": True}, run_spans(output=output))
    assert (result.score, result.explanation) == (0.0, "output holds 2 card numbers")
    assert "4111 1111" not in result.model_dump_json()
    [clean] = check(
        {"field": "output", "no_pii": True}, run_spans(output="Order 4111111111111112, call +1 415 555 0132")
    )
    assert clean.score == 1.0


def test_max_duration_reads_each_span_s_or_the_root_s_duration():
    assert verdicts(check({"on": "tool", "max_duration": "2s"})) == [
        (SEARCH_ID, 0.0, "the span took 2.5s, over the max 2s"),
        (LOOKUP_ID, 1.0, "the span took 0ms, within the max 2s"),
    ]
    [result] = check({"max_duration": "3s"})  # the root took exactly 3 s: within
    assert (result.span_id, result.score, result.explanation) == (None, 1.0, "the root span took 3s, within the max 3s")


@pytest.mark.parametrize(
    "usage",
    [
        {"gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 400},
        {"llm.token_count.total": 900},
        {"ai.usage.promptTokens": 500, "ai.usage.completionTokens": "400"},
    ],
)
def test_max_tokens_reads_the_usage_each_convention_records(usage):
    llm = make_span("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", **usage}, id=LLM)
    assert verdicts(check({"on": "llm", "max_tokens": 899}, [llm])) == [
        (LLM_ID, 0.0, "the model call used 900 tokens, over the max 899")
    ]


def test_max_tokens_on_a_trace_sums_its_model_calls_and_a_call_without_usage_gives_no_result():
    [result] = check({"max_tokens": 900})
    assert (result.span_id, result.score, result.explanation) == (
        None, 1.0, "the run's 1 model call used 900 tokens, within the max 900"
    )  # fmt: skip
    bare = make_span("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, id=LLM)
    assert check({"on": "llm", "max_tokens": 10}, [bare]) == []
    assert check({"max_tokens": 10}, [bare]) == []


def test_tool_error_rate_is_the_share_of_tool_spans_that_failed():
    [result] = check({"tool_error_rate": {"max": 0.5}})
    assert (result.span_id, result.score, result.explanation) == (
        None, 1.0, "1 of 2 tool calls failed (50%), within the max 50%: lookup"
    )  # fmt: skip
    [result] = check({"tool_error_rate": {"max": 0.2}})
    assert (result.score, result.explanation) == (0.0, "1 of 2 tool calls failed (50%), over the max 20%: lookup")
    assert check({"tool_error_rate": {"max": 0.2}}, run_spans()[:3]) == []  # no tool span: nothing to rate


def test_where_narrows_the_spans_checked():
    results = check({"on": "tool", "where": {"span_names": ["search"]}, "max_duration": "1s"})
    assert [r.span_id for r in results] == [SEARCH_ID]


def test_a_long_field_is_checked_on_its_first_characters_and_says_so():
    output = "a" * MAX_CHECKED_CHARS + "refund"
    [result] = check({"field": "output", "not_regex": "refund"}, run_spans(output=output))
    assert result.score == 1.0
    assert result.explanation == (
        f"output ({MAX_CHECKED_CHARS:,} characters) has no match of /refund/ "
        f"(its first {MAX_CHECKED_CHARS:,} of {MAX_CHECKED_CHARS + 6:,} characters checked)"
    )


def test_an_absent_field_gives_no_result():
    unanswered = make_span("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, id=LLM)
    assert check({"on": "llm", "field": "output", "no_pii": True}, [unanswered]) == []
    assert check({"on": "llm", "field": "input", "regex": "."}, [unanswered]) == []
    assert check({"field": "output", "not_regex": "refund"}, [unanswered]) == []  # no run output either


def test_the_revision_covers_the_check_not_which_spans_are_checked():
    def revision(metric: dict) -> str:
        return Checks("checks", ChecksConfig.model_validate({"metrics": {"rule": metric}})).provenance("rule").revision

    base = {"on": "tool", "field": "output", "regex": "a"}
    assert revision(base) == revision({**base, "where": {"span_names": ["x"]}, "sample_ratio": 0.5})
    assert revision(base) != revision({**base, "regex": "b"})
    assert revision(base) != revision({"on": "tool", "field": "input", "regex": "a"})
    config = ChecksConfig.model_validate({"metrics": {"rule": base}})
    assert Checks("checks", config).provenance("rule").evaluator == "code"


def test_every_problem_is_reported_at_its_key_path_in_one_run():
    metrics = {
        "bad_re": {"field": "output", "regex": "(unclosed"},
        "two": {"field": "output", "regex": "a", "no_pii": True},
        "none": {"field": "output"},
        "sess": {"on": "session", "field": "output", "regex": "a", "sample_ratio": 0.5},
        "schema": {"field": "output", "json_schema": {"type": "object", "properties": {"a": {"pattern": "x"}}}},
        "closed": {"field": "output", "json_schema": {"type": "object", "additionalProperties": False}},
        "rate": {"on": "tool", "tool_error_rate": {"max": 0.2}},
        "tokens": {"on": "tool", "max_tokens": 5},
        "nofield": {"regex": "a"},
        "ctx": {"on": "tool", "field": "context", "regex": "a"},
        "dur": {"max_duration": "soon"},
        "field_on_span": {"field": "output", "max_duration": "1s"},
        "pii_off": {"field": "output", "no_pii": False},
        "odd_field": {"field": "answer", "regex": "a"},
        "Bad-Name": {"field": "output", "regex": "a"},
    }
    text = yaml.safe_dump(
        {
            "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}},
            "processors": {"checks": {"metrics": metrics}},
            "exporters": {"debug": {}},
            "service": {
                "pipelines": {"traces": {"receivers": ["otlp"], "processors": ["checks"], "exporters": ["debug"]}}
            },
        }
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    at = "processors.checks.metrics."
    one_check = (
        "give exactly one check of regex, not_regex, json_schema, no_pii, contains, equals, max_duration, max_tokens, "
        "tool_error_rate"
    )
    assert sorted(raised.value.problems) == sorted(
        [
            f"{at}bad_re.regex: invalid regular expression (unclosed: missing ), unterminated subpattern at position 0 "
            "(got '(unclosed')",
            f"{at}two: {one_check}; got regex, no_pii",
            f"{at}none: {one_check}; got none",
            f"{at}sess: where and sample_ratio choose spans: give on: llm|tool|retrieval|agent with them",
            f"{at}schema.json_schema: json_schema at $.a: 'pattern' not supported (checked: additionalProperties, "
            "const, enum, exclusiveMaximum, exclusiveMinimum, items, maxItems, maxLength, maximum, minItems, "
            "minLength, minimum, properties, required, type)",
            f"{at}closed.json_schema: json_schema at $: additionalProperties: false is not supported "
            "(extra keys would pass)",
            f"{at}rate: tool_error_rate is a share of a run's tool spans: it takes on: trace or on: session",
            f"{at}tokens: max_tokens reads model calls' usage: it takes on: trace, llm or session",
            f"{at}nofield: regex checks a field: give field: input, output, context or attributes.KEY",
            f"{at}ctx: on: tool has no context: field context takes on: trace, session, llm or retrieval",
            f"{at}dur.max_duration: 'soon' is not a duration; use forms like 1s, 500ms, 2m, 1h30m",
            f"{at}field_on_span: max_duration reads the span itself: leave field out",
            f"{at}pii_off.no_pii: no_pii: true is the check; leave the metric out to not check (got False)",
            f"{at}odd_field.field: not a field: use input, output, context or attributes.KEY (got 'answer')",
            f"{at}Bad-Name: String should match pattern '^[a-z][a-z0-9_]*$'",
        ]
    )


def test_a_schema_s_json_survives_yaml_and_the_config_round_trip():
    config = ChecksConfig.model_validate(
        yaml.safe_load("metrics: {shape: {on: llm, field: output, json_schema: {type: object, required: [answer]}}}")
    )
    assert json.loads(json.dumps(config.metrics["shape"].json_schema)) == {"type": "object", "required": ["answer"]}


def test_a_check_that_raises_is_an_error_result_of_its_own_metric_only(monkeypatch):
    from spanscore.processors import checks

    def broken(settings, field, text):
        raise RuntimeError("broken rule")

    monkeypatch.setitem(checks._TEXT_CHECKS, "regex", broken)
    [trace] = traces_of(request_of(run_spans()))
    config = ChecksConfig.model_validate(
        {"metrics": {"broken": {"field": "output", "regex": "a"}, "fine": {"max_duration": "5s"}}}
    )
    broken_result, fine = asyncio.run(Checks("checks", config).process_trace(trace, None))
    assert (broken_result.name, broken_result.error, broken_result.error_type) == (
        "broken",
        "broken rule",
        "RuntimeError",
    )
    assert (fine.name, fine.score) == ("fine", 1.0)


# -- on: session -------------------------------------------------------------------------


def session_turn(number: int, output: str, *, start: int, end: int, tokens: int | None = None, tools=()):
    """One trace of a session: its root (`output` its answer, when given) from `start` to
    `end`, a model call recording `tokens` when given, a tool span per (name, error) in `tools`."""
    trace_id = bytes([number]) * 16
    attributes = {"openinference.span.kind": "CHAIN", "input.value": f"question {number}"}
    if output:
        attributes["output.value"] = output
    root = make_span("turn", attributes, trace_id=trace_id, start=start, end=end)
    spans = [root]
    if tokens is not None:
        usage = {"openinference.span.kind": "LLM", "llm.token_count.total": tokens}
        spans.append(make_span("chat", usage, parent=root, trace_id=trace_id, start=start + 1, end=start + 2))
    for name, error in tools:
        called = {"openinference.span.kind": "TOOL", "tool.name": name, "input.value": "{}"}
        tool = make_span(name, called, parent=root, trace_id=trace_id, start=start + 3, end=start + 4, error=error)
        spans.append(tool)
    [trace] = traces_of(request_of(spans))
    return trace


def check_session(metric: dict, turns) -> list:
    """The session's outputs for check `rule` over `turns`, after each turn's own outputs
    were found empty: an `on: session` check says nothing per trace."""
    checks = Checks("checks", ChecksConfig.model_validate({"metrics": {"rule": {"on": "session", **metric}}}))
    session = Session("chat-1", Resource(), 0.0)
    for trace in turns:
        assert asyncio.run(checks.process_trace(trace, session)) == []
    outputs = list(asyncio.run(checks.process_session(session)))
    assert session.state == {}  # the turns' parts are let go
    return outputs


def test_a_session_text_check_passes_when_every_turn_passes_and_names_the_first_that_fails():
    answers = ["Your order ships today.", "We will refund you.", "", "A refund is on its way."]
    turns = [session_turn(n, text, start=n * SECOND, end=n * SECOND + 10) for n, text in enumerate(answers, 1)]
    [result] = check_session({"field": "output", "not_regex": "(?i)refund"}, turns)
    # Turn 3 records no answer: 3 turns are checked, 2 fail, the first of them is named.
    assert (result.span_id, result.score, result.metadata) == (None, 0.0, {"check": "not_regex"})
    assert result.explanation == (
        "2 of the 3 turns recording output fail; turn 2: output matches /(?i)refund/ at character 8: refund"
    )
    [result] = check_session({"field": "output", "not_regex": "(?i)refund"}, turns[:1] + turns[2:3])
    assert (result.score, result.explanation) == (
        1.0,
        "the 1 turn recording output passes; turn 1: output (23 characters) has no match of /(?i)refund/",
    )
    [result] = check_session({"field": "output", "regex": "(?i)^(your|we|a) "}, turns)
    assert (result.score, result.explanation) == (
        1.0,
        "all 3 turns recording output pass; turn 4: output matches /(?i)^(your|we|a) / at character 0: A ",
    )
    assert check_session({"field": "output", "regex": "x"}, turns[2:3]) == []  # nothing to check


def test_a_session_s_duration_runs_from_its_first_start_to_its_last_end():
    turns = [
        session_turn(1, "a", start=0, end=SECOND),
        session_turn(2, "b", start=5 * SECOND, end=13 * SECOND // 2),
    ]
    [result] = check_session({"max_duration": "5s"}, turns)
    assert (result.score, result.explanation) == (
        0.0,
        "the session's 2 traces took 6.5s from the first start to the last end, over the max 5s",
    )
    [result] = check_session({"max_duration": "7s"}, turns)
    assert result.score == 1.0


def test_session_tokens_sum_every_turn_s_model_calls():
    turns = [
        session_turn(1, "a", start=0, end=10, tokens=900),
        session_turn(2, "b", start=20, end=30),  # no model call recorded
        session_turn(3, "c", start=40, end=50, tokens=300),
    ]
    [result] = check_session({"max_tokens": 1000}, turns)
    assert (result.score, result.explanation) == (
        0.0,
        "the session's 2 model calls used 1,200 tokens, over the max 1,000",
    )
    [result] = check_session({"max_tokens": 1200}, turns)
    assert result.score == 1.0
    assert check_session({"max_tokens": 1000}, turns[1:2]) == []


def test_session_tool_error_rate_is_the_share_of_all_its_tool_spans_that_failed():
    turns = [
        session_turn(1, "a", start=0, end=10, tools=[("search", None), ("lookup", "timeout")]),
        session_turn(2, "b", start=20, end=30, tools=[("search", None), ("search", None)]),
    ]
    [result] = check_session({"tool_error_rate": {"max": 0.2}}, turns)
    # 1 failed of 4: 25%, over 20%.
    assert (result.score, result.explanation) == (
        0.0,
        "1 of 4 tool calls in the session failed (25%), over the max 20%: lookup",
    )
    [result] = check_session({"tool_error_rate": {"max": 0.25}}, turns)
    assert result.score == 1.0


def test_session_checks_are_scored_at_the_close_beside_trace_checks():
    config = ChecksConfig.model_validate(
        {"metrics": {"each": {"field": "output", "regex": "a"}, "whole": {"on": "session", "max_tokens": 10}}}
    )
    checks = Checks("checks", config)
    assert (checks.session_metric_names, checks.trace_metric_names, checks.uses_sessions) == (
        ("whole",), ("each",), True
    )  # fmt: skip
    assert not Checks("checks", ChecksConfig.model_validate({"metrics": {"each": {"max_tokens": 1}}})).uses_sessions
    session = Session("chat-1", Resource(), 0.0)
    trace = session_turn(1, "a", start=0, end=10, tokens=4)
    assert [r.name for r in asyncio.run(checks.process_trace(trace, session))] == ["each"]
    assert [r.name for r in asyncio.run(checks.process_session(session))] == ["whole"]
    # A trace without a session is no turn of one.
    assert [r.name for r in asyncio.run(checks.process_trace(trace, None))] == ["each"]
    assert (
        checks.provenance("whole").revision
        != Checks("checks", ChecksConfig.model_validate({"metrics": {"whole": {"max_tokens": 10}}}))
        .provenance("whole")
        .revision
    )


def test_a_session_check_that_raised_on_a_turn_is_an_error_of_its_own_metric(monkeypatch):
    def broken(settings, trace):
        raise RuntimeError("a bug")

    monkeypatch.setattr(checks_module, "turn_part", broken)
    [result] = check_session({"max_tokens": 10}, [session_turn(1, "a", start=0, end=10, tokens=4)])
    assert (result.name, result.score, result.error_type) == ("rule", None, "RuntimeError")
