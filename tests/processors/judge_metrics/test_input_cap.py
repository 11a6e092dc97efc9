"""max_input_tokens: every judge call fits it, however long the trace; what the judge was
shown of a trace, and how much of it that is."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess

import pytest

from spanscore.core.redaction import Redaction
from spanscore.processors.agent_trace import AgentTrace, ToolDefinition
from spanscore.processors.judge_metrics.client import forget_modes
from spanscore.processors.judge_metrics.config import build_judge
from spanscore.processors.judge_metrics.planner import (
    EXTRACTED_TOKENS,
    INPUT_TOO_LARGE,
    JudgePlan,
    TooLittleRoom,
    judge_view,
)
from spanscore.processors.judge_metrics.prompts import TRACE_CLOSE, TRACE_OPEN, PromptBuilder, prompt_tokens
from spanscore.processors.judge_metrics.token_estimate import estimate_tokens, messages_tokens
from spanscore.processors.judge_metrics.trace_view import FIELD_CHARS_FLOOR, DoesNotFit, fit
from tests.support.judge_answers import answer_for, schema_judge, schema_of
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.processes import SPANSCORE
from tests.support.scripted_judge import flight_trace, tool_step
from tests.support.trail import longest_trail_trace, trail_traces

STEP_LINE = re.compile(r"^(\d+)\. (?:tool call #\d+|llm) ", re.MULTILINE)
MARKER = re.compile(
    r"^\[… (\d+) of (\d+) steps left out here to fit the judge's input: steps (\d+)-(\d+)", re.MULTILINE
)


def data_block_of(text: str) -> str:
    return text[text.index(TRACE_OPEN) : text.index(TRACE_CLOSE) + len(TRACE_CLOSE)]


def chat_requests(server: OpenAIServer) -> list[RecordedRequest]:
    return server.requests_to("/chat/completions")


async def judged_by_loopback(server: OpenAIServer, trace: AgentTrace, **plan_options):
    forget_modes()  # each server starts from json_schema
    judge = build_judge({"model": "judge-test", "base_url": server.base_url, "max_retries": 1, "max_judge_wait": "5s"})
    try:
        return await JudgePlan(**plan_options).judge_trace(trace, judge)
    finally:
        await judge.close()


# -- the estimate -------------------------------------------------------------------------


def test_the_estimate_is_utf8_bytes_over_three_rounded_up_plus_four_per_message():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("é") == 1  # 2 bytes
    assert estimate_tokens("€€") == 2  # 6 bytes
    messages = [{"role": "system", "content": "abcdef"}, {"role": "user", "content": "abcdefg"}]
    assert messages_tokens(messages) == (4 + 2) + (4 + 3)
    schema = {"type": "object"}
    # A blank line, the 78-byte sentence that introduces the schema and its 17 bytes of
    # compact JSON, as the client's fallback modes spell it: 97 bytes, 33 tokens.
    assert prompt_tokens(messages, schema) == 13 + 33


# -- the cap holds on a real long trace ----------------------------------------------------


@pytest.mark.parametrize(
    "mode,cap",
    [("per_metric", 3_000), ("per_metric", 5_000), ("per_metric", 8_000), ("combined", 4_500), ("combined", 9_000)],
)
async def test_every_call_fits_the_cap_on_a_600_kb_trace(mode, cap):
    trace = longest_trail_trace()
    with OpenAIServer(handler=long_extraction_judge()) as server:
        judged = await judged_by_loopback(server, trace, mode=mode, max_input_tokens=cap)
    requests = chat_requests(server)
    assert len(requests) == (8 if mode == "per_metric" else 2)
    assert all(result.error is None for result in judged.results)
    sizes = [prompt_tokens(request.messages(), schema_of(request)[1]) for request in requests]
    # Within the cap, and the largest call close to it: the room is used, not wasted.
    assert cap - 150 <= max(sizes) <= cap
    # One data block for every call, as the servers' prefix caches need; cut to fit.
    blocks = {data_block_of(request.messages()[-1]["content"]) for request in requests}
    assert len(blocks) == 1
    coverage = judged.coverage
    assert coverage.tokens == estimate_tokens(blocks.pop()) < coverage.tokens_uncut
    assert coverage.tokens_uncut == estimate_tokens(PromptBuilder().data_block(trace))
    assert coverage.share < judge_view(trace)[1].share


def long_extraction_judge(extracted: dict | None = None):
    """A judge whose extraction fills the room kept for it; the scores are the schema's."""
    extracted = extracted or {"task": "t" * 5_000, "outcome": "o" * 5_000, "plan": ["p" * 400] * 300}

    def handler(request: RecordedRequest) -> Reply:
        name, schema = schema_of(request)
        return Reply(content=json.dumps(extracted if name == "extract" else answer_for(schema)))

    return handler


def json_object_judge(request: RecordedRequest) -> Reply:
    """Answers from the schema of a `json_object` response format, as llama.cpp's server is asked."""
    return Reply(content=json.dumps(answer_for(request.body["response_format"]["schema"])))


async def test_the_cap_holds_when_the_schema_is_spelled_out_in_the_system_message():
    trace = longest_trail_trace()
    with OpenAIServer(handler=json_object_judge) as server:
        server.rejected_response_formats = {"json_schema"}  # as llama.cpp's server does
        await judged_by_loopback(server, trace, max_input_tokens=3_000)
    answered = [r for r in chat_requests(server) if r.body["response_format"]["type"] == "json_object"]
    assert len(answered) == 8
    for request in answered:
        assert "matching this JSON schema" in request.messages()[0]["content"]
        assert messages_tokens(request.messages()) <= 3_000


async def test_a_long_extraction_answer_is_cut_to_the_room_kept_for_it():
    """Extraction answers after the data block is laid out; what it found is cut to
    EXTRACTED_TOKENS, plan items left out from the middle, so the calls still fit. Four
    bytes a character (newlines are indented by three spaces) is the most text can take."""
    huge = {"task": "𝔸" * 5_000, "outcome": "\n" * 5_000, "plan": [f"step {i} " + "é" * 400 for i in range(300)]}
    with OpenAIServer(handler=long_extraction_judge(huge)) as server:
        await judged_by_loopback(server, flight_trace(), metrics=["plan_quality"], max_input_tokens=4_000)
    [_, scoring] = chat_requests(server)
    user = scoring.messages()[-1]["content"]
    extracted = user[user.index("<extracted_data>") : user.index("</extracted_data>") + len("</extracted_data>")]
    assert estimate_tokens(extracted) <= EXTRACTED_TOKENS
    assert "1. step 0 " in extracted and "300. step 299 " in extracted
    marker = r"\[… \d+ of 300 plan items left out here to fit the judge's input: plan items \d+-\d+\]"
    assert re.search(marker, extracted)
    _, schema = schema_of(scoring)
    assert prompt_tokens(scoring.messages(), schema) <= 4_000


# -- small traces are left alone -------------------------------------------------------------

# SHA-256 of the data blocks the judge was shown before max_input_tokens existed: the
# cap must not change a byte of a trace that fits. The TRAIL traces in trace id order.
BEFORE_FLIGHT = "ab8d3882c30f11277d869690fe2650ef0b4c44d33f28c992871c3c8e94dcb312"
BEFORE_TRAIL = [
    "6c8b7de04da6783fbf2fc8d68193a99e0c9853748de41938a47e303f5289aafe",
    "565ab7c89579e8a0f03dc4ae9863ff7011cbd4b0b4b58676dc74e4b507667186",
    "ff1d8db018d3c2ef231b0a49aa55abff1b44bd99c8b4931f7216ab71342fa0a2",  # the long one
    "c90b9f71ebbc31bf27b024c22ac40ea370af8c84ee0bf3efc5020281760354ea",
    "eb3e44d2734a60d0d4c4092279c934b09c5ea7016b28fcde2151dfbf03d9977d",
]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_a_trace_that_fits_is_shown_byte_for_byte_as_before():
    text, coverage = judge_view(flight_trace())
    assert sha256(text) == BEFORE_FLIGHT
    assert coverage.complete and coverage.share == 1.0
    traces = trail_traces()
    assert len(traces) == len(BEFORE_TRAIL)
    for trace, before in zip(traces, BEFORE_TRAIL):
        text, coverage = judge_view(trace)  # the default cap: every one of them fits
        assert sha256(text) == before and coverage.tokens == coverage.tokens_uncut
    # And so the judge gets them: through the loopback server, the default settings.
    with OpenAIServer(handler=schema_judge(score=0.8)) as server:
        await judged_by_loopback(server, flight_trace())
    assert {sha256(data_block_of(r.messages()[-1]["content"])) for r in chat_requests(server)} == {BEFORE_FLIGHT}


# -- shrinking, then leaving steps out ---------------------------------------------------------


def many_steps(count: int, result_chars: int = 300) -> AgentTrace:
    return AgentTrace(
        trace_id="00000000000000000000000000000001",
        user_input="u" * 10,
        final_output="f" * 10,
        steps=[tool_step("t", None, result="r" * result_chars, span=f"s{i}") for i in range(count)],
    )


def test_fields_shrink_before_any_step_is_left_out():
    trace = many_steps(10)
    layout = PromptBuilder().trace_layout(trace)
    whole = fit(layout, 2000, None)
    view = fit(layout, 2000, whole.coverage.tokens - 50)
    assert FIELD_CHARS_FLOOR <= view.coverage.field_limit < 300
    assert view.coverage.steps_shown == 10 and not MARKER.search(view.text)
    assert view.coverage.tokens <= whole.coverage.tokens - 50
    # The largest limit that fits: one more character per field would not.
    assert fit(layout, view.coverage.field_limit + 1, None).coverage.tokens > whole.coverage.tokens - 50


@pytest.mark.parametrize("budget,shown", [(300, 2), (420, 3), (700, 6)])
def test_steps_are_left_out_from_the_middle_keeping_the_first_and_last(budget, shown):
    trace = many_steps(40)
    view = fit(PromptBuilder().trace_layout(trace), 2000, budget)
    assert view.coverage.steps_shown == shown
    assert view.coverage.tokens <= budget
    assert view.coverage.field_limit == FIELD_CHARS_FLOOR
    numbers = [int(n) for n in STEP_LINE.findall(view.text)]
    [marker] = MARKER.findall(view.text)
    left_out, total, first, last = map(int, marker)
    assert total == 40 and left_out == last - first + 1 == 40 - shown
    assert f"tool calls #{first}-#{last}]" in view.text
    # The first and last steps, then inwards from both ends in turn.
    head, tail = list(range(1, first)), list(range(last + 1, 41))
    assert numbers == head + tail and numbers[0] == 1 and numbers[-1] == 40
    assert len(head) - len(tail) in (0, 1)
    assert view.coverage.steps_total == 40
    # The marker sits where the steps were.
    where = view.text.index(f"\n[… {left_out} of 40 steps")
    assert view.text.index(f"\n{first - 1}. tool call") < where < view.text.index(f"\n{last + 1}. tool call")


def test_with_only_the_ends_left_fields_shrink_below_the_floor_then_it_does_not_fit():
    trace = many_steps(40)
    layout = PromptBuilder().trace_layout(trace)
    view = fit(layout, 2000, 150)
    assert view.coverage.field_limit == 63  # the largest that fits 450 bytes
    assert [int(n) for n in STEP_LINE.findall(view.text)] == [1, 40]
    assert view.coverage.tokens <= 150
    with pytest.raises(DoesNotFit, match="with fields cut to 1 character and only the first and last steps"):
        fit(layout, 2000, 60)


def test_the_same_trace_and_budget_give_the_same_block():
    trace = longest_trail_trace()
    assert judge_view(trace, max_input_tokens=6_000) == judge_view(trace, max_input_tokens=6_000)


# -- coverage, by hand --------------------------------------------------------------------------


def test_coverage_counts_the_field_characters_shown_of_all_of_them():
    # Fields: user_input 10, final_output 10; the step's name 1 and result 300 (no arguments).
    trace = many_steps(1)
    _, coverage = judge_view(trace, max_field_chars=100)
    assert (coverage.chars_shown, coverage.chars_total) == (10 + 10 + 1 + 100, 321)
    assert coverage.share == pytest.approx(121 / 321)
    assert (coverage.steps_shown, coverage.steps_total, coverage.field_limit) == (1, 1, 100)
    _, coverage = judge_view(trace)
    assert coverage.share == 1.0 and coverage.complete


def test_coverage_of_a_block_with_steps_left_out():
    """700 tokens hold 2,100 bytes. Outside the steps the block takes 81 (its 5 lines and
    their newlines); at the floor a step takes 275 bytes with its newline (its 31-byte
    head line, a newline, `   result: ` and 200 characters and `[… truncated 100
    characters]`, 242 bytes), 277 from step 10 on; the marker 90 and a newline. Steps 1-3
    and 38-40: 81 + 3 x 275 + 3 x 277 + 91 = 1,828 bytes; step 4 would make 2,103."""
    view = fit(PromptBuilder().trace_layout(many_steps(40)), 2000, 700)
    assert len(view.text.encode()) == 1_828
    assert (view.coverage.steps_shown, view.coverage.steps_total) == (6, 40)
    # Fields: 10 + 10 outside the steps, 1 + 300 in each: 12,060 in all; 1 + 200 of a step shown.
    assert (view.coverage.chars_shown, view.coverage.chars_total) == (20 + 6 * 201, 12_060)
    assert view.coverage.share == pytest.approx(1_226 / 12_060)
    assert view.coverage.tokens == 610  # 1,828 / 3, rounded up


def test_redacted_text_is_what_is_counted():
    trace = AgentTrace(trace_id="00000000000000000000000000000002", user_input="mail bob@example.com", final_output="")
    _, coverage = judge_view(trace, redaction=Redaction())
    assert coverage.chars_total == len("mail [redacted email]")


# -- too small a cap ------------------------------------------------------------------------------


def test_a_cap_that_cannot_hold_the_instructions_is_an_error_saying_the_least_that_is_enough():
    with pytest.raises(TooLittleRoom, match="the combined call takes about") as raised:
        JudgePlan(mode="combined", max_input_tokens=4_000)
    least = int(re.search(r"set at least ([\d,]+)", str(raised.value)).group(1).replace(",", ""))
    assert JudgePlan(mode="combined", max_input_tokens=least).room_problem() is None
    with pytest.raises(TooLittleRoom):
        JudgePlan(mode="combined", max_input_tokens=least - 1)
    # Fewer metrics, shorter instructions: less is enough.
    assert JudgePlan(metrics=["confidence"], mode="combined", max_input_tokens=least - 1).room_problem() is None


def test_spanscore_validate_names_the_key_of_a_cap_too_small(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "receivers: {otlp: {}}\n"
        "processors: {judge_metrics: {judge: {model: m, base_url: 'http://127.0.0.1:9/v1'}, max_input_tokens: 2000}}\n"
        "exporters: {debug: {}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [judge_metrics], exporters: [debug]}}}\n"
    )
    result = subprocess.run([*SPANSCORE, "validate", str(config)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    [problem] = result.stderr.splitlines()[1:]
    assert re.fullmatch(
        r"  processors\.judge_metrics\.max_input_tokens: 2,000 leaves the trace too little room: the \w+ call "
        r"takes about [\d,]+ tokens without it and the trace needs at least 1,000; set at least [\d,]+ \(got 2000\)",
        problem,
    ), problem
    assert "Traceback" not in result.stderr


async def test_a_trace_that_cannot_fit_at_all_is_an_error_without_a_call():
    tools = [ToolDefinition(name=f"tool_{i}", description="d" * 50) for i in range(3_000)]
    trace = flight_trace(available_tools=tools)
    with OpenAIServer(handler=schema_judge(score=0.8)) as server:
        judged = await judged_by_loopback(
            server, trace, metrics=["confidence", "argument_correctness"], max_input_tokens=3_000
        )
    assert chat_requests(server) == []
    assert judged.coverage is None
    for result in judged.results:
        assert result.error_type == INPUT_TOO_LARGE and result.score is None
        assert result.error.startswith("the trace does not fit max_input_tokens (3,000): needs ")
