"""The evidence rules on hand-made spans and on real TRAIL spans: what each rule blames,
on which span, with which category and impact."""

from __future__ import annotations

import json

import pytest

from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.offline.otlp_files import read_requests
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import agent_trace_of, span_views_of
from spanscore.processors.agent_trace.build import SpanViews, build_agent_trace
from spanscore.processors.localization.evidence import category_of_error, find_evidence
from spanscore.processors.localization.taxonomy import taxonomy
from tests.support.agent_fixtures import SPANS_DIR
from tests.support.agent_spans import TRACE_ID, make_span
from tests.support.otlp_json import read_requests as read_recorded
from tests.support.otlp_json import spans_by_trace
from tests.support.spans import request_of
from tests.support.trail import TRAIL


@pytest.mark.parametrize(
    ("text", "code", "category"),
    [
        ("Too Many Requests", None, "rate_limiting"),
        ("openai.RateLimitError: Rate limit reached for gpt-4o", None, "rate_limiting"),
        ("request failed", 429, "rate_limiting"),
        ("Error code: 429 - {'error': 'slow down'}", None, "rate_limiting"),
        ("AuthenticationError: Incorrect API key provided", None, "authentication_error"),
        ("HTTP 403", None, "authentication_error"),
        ("request failed", 401, "authentication_error"),
        ("ReadTimeout: HTTPSConnectionPool read timed out", None, "timeout"),
        ("upstream gave up", 504, "timeout"),
        ("This model's maximum context length is 128000 tokens", None, "resource_exhaustion"),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'x.csv'", None, "resource_not_found"),
        ("page gone", 404, "resource_not_found"),
        ("TypeError: search() got an unexpected keyword argument 'limit'", None, "tool_related_hallucination"),
        ("TypeError: f() missing 1 required positional argument: 'q'", None, "tool_related_hallucination"),
        ("ModuleNotFoundError: No module named 'pandas'", None, "environment_setup_error"),
        ("InterpreterError: Forbidden function evaluation: 'open'", None, "tool_related_hallucination"),
        ("403 Forbidden", None, "authentication_error"),
        ("Code parsing failed on line 1 due to: SyntaxError", None, "formatting_error"),
        ("JSONDecodeError: Expecting value: line 1 column 1", None, "formatting_error"),
        ("503 Service Unavailable", None, "service_error"),
        ("boom", 502, "service_error"),
        ("ValueError: something odd", None, None),
        ("failed at line 512 of the script", None, None),  # a number is not a status code
    ],
)
def test_what_an_error_says_gives_its_category(text, code, category):
    assert category_of_error(text, code) == category
    if category is not None:
        assert category in taxonomy().categories


def _run(*spans):
    trace = Trace(TRACE_ID, 0.0)
    request = request_of(list(spans))
    resource_spans = request.resource_spans[0]
    scope_spans = resource_spans.scope_spans[0]
    origin = ScopeOrigin(resource_spans, scope_spans)
    for position, one in enumerate(scope_spans.spans):
        trace.add(position, one, origin)
    return find_evidence(span_views_of(trace), agent_trace_of(trace))


def _ids(n: int) -> bytes:
    return n.to_bytes(8, "big")


ROOT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.agent.name": "helper",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Find the file"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]),
}


def _chat(n: int, start: int, parent: int = 1, text: str = "thinking", **extra):
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": text}]}]),
        "gen_ai.usage.input_tokens": 5,
    }
    return make_span("chat m", {**attributes, **extra}, id=_ids(n), parent=_ids(parent), start=start)


def _tool(n: int, start: int, name: str, arguments: dict, result: str | None = "ok", error: str | None = None):
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result
    return make_span(f"execute_tool {name}", attributes, id=_ids(n), parent=_ids(1), start=start, error=error)


def test_a_failed_http_call_is_blamed_on_the_deepest_span_and_a_later_success_makes_it_low_impact():
    blames = _run(
        make_span("agent", ROOT, id=_ids(1), start=0, end=10_000),
        _chat(2, 100),
        _tool(3, 200, "search", {"q": "a"}, result=None, error="search failed"),
        make_span("GET", {"http.response.status_code": 429}, id=_ids(4), parent=_ids(3), start=210),
        _tool(5, 400, "search", {"q": "b"}),
        _chat(6, 500, text="Done."),
    )
    [blame] = blames
    assert (blame.span_id, blame.category, blame.impact, blame.rule) == (
        _ids(4).hex(),
        "rate_limiting",
        "low",
        "error_status",
    )
    assert blame.evidence == "HTTP 429"


def test_a_repeated_failed_call_is_resource_abuse_on_its_first_repeat_and_not_blamed_twice():
    blames = _run(
        make_span("agent", ROOT, id=_ids(1), start=0, end=10_000),
        _tool(
            2,
            100,
            "page_down",
            {"": ""},
            result=None,
            error="TypeError: forward() got an unexpected keyword argument ''",
        ),
        _tool(
            3,
            200,
            "page_down",
            {"": ""},
            result=None,
            error="TypeError: forward() got an unexpected keyword argument ''",
        ),
        _tool(
            4,
            300,
            "page_down",
            {"": ""},
            result=None,
            error="TypeError: forward() got an unexpected keyword argument ''",
        ),
        _chat(5, 400, text="Done."),
    )
    assert [(b.span_id, b.category, b.rule) for b in blames] == [
        (_ids(2).hex(), "tool_related_hallucination", "error_status"),
        (_ids(3).hex(), "resource_abuse", "repeated_call"),
    ]
    assert blames[1].explanation == (
        f"called page_down again with the same arguments after it failed at span {_ids(2).hex()}, and 1 more time"
    )
    assert blames[0].impact == "medium"  # no later page_down succeeded


def test_an_error_passed_up_to_the_root_is_blamed_once_where_it_started_with_high_impact():
    blames = _run(
        make_span("agent", ROOT, id=_ids(1), start=0, end=10_000, error="ToolError: Read timed out"),
        _chat(2, 100),
        _tool(3, 200, "fetch", {"url": "u"}, result=None, error="ToolError: Read timed out"),
    )
    [blame] = blames
    assert (blame.span_id, blame.category, blame.impact) == (_ids(3).hex(), "timeout", "high")


def test_a_step_that_failed_with_nothing_failed_below_it_is_blamed_on_the_model_call_inside():
    blames = _run(
        make_span("agent", ROOT, id=_ids(1), start=0, end=10_000),
        make_span(
            "Step 1",
            {"openinference.span.kind": "CHAIN"},
            id=_ids(7),
            parent=_ids(1),
            start=50,
            end=900,
            error="AgentParsingError: Code parsing failed on line 1 due to: SyntaxError",
        ),
        _chat(2, 100, parent=7),
        _chat(3, 300, parent=7, text="print(("),
        _chat(4, 1000, text="Done."),
    )
    [blame] = blames
    assert (blame.span_id, blame.category) == (_ids(3).hex(), "formatting_error")
    assert blame.explanation.startswith("the output of chat m could not be used: Step 1 failed: ")


def test_a_run_without_an_answer_is_goal_deviation_on_its_last_model_call():
    root = {key: value for key, value in ROOT.items() if key != "gen_ai.output.messages"}
    blames = _run(
        make_span("agent", root, id=_ids(1), start=0, end=10_000),
        _chat(2, 100, text="", **{"gen_ai.output.messages": "[]"}),
        _tool(3, 200, "search", {"q": "a"}),
        _chat(4, 300, text="", **{"gen_ai.output.messages": "[]"}),
    )
    [blame] = blames
    assert (blame.span_id, blame.category, blame.impact, blame.rule) == (
        _ids(4).hex(),
        "goal_deviation",
        "high",
        "no_final_answer",
    )


def test_an_answer_right_after_an_empty_tool_result_is_blamed_on_the_answering_call():
    blames = _run(
        make_span("agent", ROOT, id=_ids(1), start=0, end=10_000),
        _chat(2, 100),
        _tool(3, 200, "lookup", {"id": 7}, result="[]"),
        _chat(4, 300, text="Done."),
    )
    [blame] = blames
    assert (blame.span_id, blame.category, blame.rule) == (
        _ids(4).hex(),
        "tool_output_misinterpretation",
        "empty_result_answered",
    )


def test_a_clean_run_states_no_error():
    assert (
        _run(
            make_span("agent", ROOT, id=_ids(1), start=0, end=10_000),
            _chat(2, 100),
            _tool(3, 200, "lookup", {"id": 7}, result='{"name": "x"}'),
            _chat(4, 300, text="Done."),
        )
        == []
    )


def _trail_trace(trace_id: str, path=TRAIL) -> Trace:
    problems: list[str] = []
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for _, request in read_requests(path, problems):
        assembler.add(request, 0.0)
    assert not problems
    return next(trace for trace in assembler.pop_all() if trace.trace_id.hex() == trace_id)


def test_on_a_real_trail_run_the_failed_searches_are_found_on_their_tool_spans():
    # Three web searches in this run failed with "No results found for query: ...";
    # the step spans above them failed with the same error passed up.
    trace = _trail_trace("3acaa3150977e199eddb95c64f2ada2e")
    blames = find_evidence(span_views_of(trace), agent_trace_of(trace))
    assert [(b.span_id, b.category, b.rule) for b in blames] == [
        ("3feda8d3fe26704d", "resource_not_found", "error_status"),
        ("d91150965d295882", "resource_not_found", "error_status"),
        ("a383a3205482f8db", "resource_not_found", "error_status"),
    ]
    assert all(b.evidence.startswith("Exception: No results found for query: ") for b in blames)
    views = span_views_of(trace)
    assert {views.by_id[b.span_id].name for b in blames} == {"SearchInformationTool"}


FAILED_CALLS = TRAIL.parents[1] / "trail-failed-calls" / "gaia-2.otlp.jsonl.gz"


def _people_blamed(trace_id: str) -> dict[str, list[str]]:
    path = FAILED_CALLS.parent / "gaia-2.annotations.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["trace_id"] == trace_id:
            found: dict[str, list[str]] = {}
            for error in record["errors"]:
                found.setdefault(error["location"], []).append(error["category"].strip())
            return found
    raise AssertionError(trace_id)


def test_on_a_real_trail_run_a_call_repeated_after_it_failed_is_resource_abuse_where_people_put_it():
    trace_id = "01c5727165fc43899b3b594b9bef5f19"
    trace = _trail_trace(trace_id, FAILED_CALLS)
    blames = find_evidence(span_views_of(trace), agent_trace_of(trace))
    assert [(b.span_id, b.category, b.rule) for b in blames] == [
        ("2c5721972087dfc7", "tool_related_hallucination", "error_status"),
        ("8d5295fbf94ec804", "resource_abuse", "repeated_call"),
    ]
    assert blames[0].evidence == "TypeError: PageDownTool.forward() got an unexpected keyword argument ''"
    # People labelled the repeat, and only it, as Resource Abuse.
    people = _people_blamed(trace_id)
    assert people["8d5295fbf94ec804"] == ["Resource Abuse"] and "2c5721972087dfc7" not in people


def test_on_a_real_trail_run_code_that_could_not_run_is_blamed_on_the_model_call_that_wrote_it():
    trace_id = "041b7f9c8c76c2ca1a8e67c6769267c3"
    trace = _trail_trace(trace_id, FAILED_CALLS)
    views = span_views_of(trace)
    [blame] = find_evidence(views, agent_trace_of(trace))
    # The step span failed ("Code execution failed ... InterpreterError"), nothing below
    # it did: the model call inside the step that wrote the code is blamed.
    assert (blame.span_id, blame.category) == ("1832b9469b9b862d", "tool_related_hallucination")
    assert views.by_id[blame.span_id].name == "LiteLLMModel.__call__"
    assert blame.evidence.startswith("AgentExecutionError: Code execution failed at line 'final_answer = ")
    assert _people_blamed(trace_id)["1832b9469b9b862d"] == ["Tool-related", "Tool-related"]


def test_on_clean_runs_recorded_from_real_frameworks_the_rules_blame_nothing():
    # Real instrumentation of eleven agent frameworks and of RAG apps under five
    # instrumentations, 21 recordings (not looked at to write the rules): runs that went
    # well state no error, and nothing is blamed on them. The RAG apps' unfaithful answers
    # are stated by no span: not blamed.
    paths = sorted((SPANS_DIR / "frameworks").glob("*.jsonl"))
    assert len(paths) == 21
    traces = 0
    for path in paths:
        for trace_id, spans in spans_by_trace(read_recorded(path)).items():
            views = SpanViews(spans)
            assert not any(view.error for view in views.views), path.name
            assert find_evidence(views, build_agent_trace(trace_id, views)) == [], path.name
            traces += 1
    assert traces == 48
