"""failure_localization with a judge: a real OpenAI-protocol server over loopback (its
answers scripted from what each request shows, so they test the plumbing, not a
judgment): every call within max_input_tokens, windows that read every step once with
the summary carried, bisection that narrows to the first error, the judge's blame on
the right span, its cost counted, and the evidence standing when the judge fails."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from spanscore.core.result import MetricResult
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.failure_localization import FailureLocalization, FailureLocalizationConfig
from spanscore.processors.judge_metrics.prompts import prompt_tokens
from spanscore.processors.localization.judging import Localizer, check_room
from spanscore.processors.localization.judging import TooLittleRoom as NoRoom
from tests.support.agent_spans import TRACE_ID, make_span
from tests.support.judge_answers import schema_of
from tests.support.localization_judge import localization_judge, shown_steps
from tests.support.openai_server import ErrorReply, OpenAIServer
from tests.support.spans import request_of
from tests.support.trail import TRAIL

CAP = 5_400
ROOT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Plan a trip"}]}]),
    "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": "Go Tuesday."}]}]
    ),
}


def _id(n: int) -> bytes:
    return n.to_bytes(8, "big")


def long_run(marked: set[int], steps: int = 8, failing_tool: int | None = None) -> Trace:
    """A run of `steps` tool calls, each with 1,500-character arguments and result;
    steps in `marked` (1-based) say "wrong" in their result."""
    spans = [make_span("agent", ROOT, id=_id(1), start=0, end=10**6)]
    for n in range(1, steps + 1):
        result = ("wrong turn " if n in marked else "fine ") + "r" * 1_500
        spans.append(
            make_span(
                f"execute_tool t{n}",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": f"t{n}",
                    "gen_ai.tool.call.arguments": json.dumps({"q": "a" * 1_500}),
                    "gen_ai.tool.call.result": result,
                },
                id=_id(100 + n),
                parent=_id(1),
                start=1_000 * n,
                error="HTTP 503 Service Unavailable" if n == failing_tool else None,
            )
        )
    trace = Trace(TRACE_ID, 0.0)
    resource_spans = request_of(spans).resource_spans[0]
    origin = ScopeOrigin(resource_spans, resource_spans.scope_spans[0])
    for position, span in enumerate(resource_spans.scope_spans[0].spans):
        trace.add(position, span, origin)
    return trace


def localize(server: OpenAIServer, trace: Trace, **settings):
    config = FailureLocalizationConfig(
        when="always",
        max_input_tokens=CAP,
        judge={"model": "judge-test", "base_url": server.base_url, "api_key": "k", "cache": {"enabled": False}},
        **settings,
    )

    async def run():
        processor = FailureLocalization("failure_localization", config)
        await processor.start()
        try:
            return await processor.process_trace(trace, None)
        finally:
            await processor.shutdown(0.0)

    return asyncio.run(run())


def judge_requests(server: OpenAIServer) -> list:
    return server.requests_to("/chat/completions")


def within_cap(request) -> int:
    _, schema = schema_of(request)
    return prompt_tokens(request.messages(), schema)


def test_windows_read_every_step_once_within_the_cap_and_carry_the_summary():
    with OpenAIServer(handler=localization_judge()) as server:
        outputs = localize(server, long_run(marked={6}))
        requests = judge_requests(server)
    assert len(requests) >= 2  # the run does not fit one call
    assert all(within_cap(r) <= CAP for r in requests)
    seen = [
        number for r in requests for number, _, _ in shown_steps(r.messages()[-1]["content"].split("<trace_data>")[-1])
    ]
    assert seen == list(range(1, 9))  # each step once, in order
    first_window = [n for n, _, _ in shown_steps(requests[0].messages()[-1]["content"])]
    assert (
        f"What the earlier steps did (summary): read steps 1 to {max(first_window)}"
        in (requests[1].messages()[-1]["content"])
    )
    [finding] = [o for o in outputs if isinstance(o, SpanFinding)]
    assert finding.span_id == _id(106)
    assert finding.attribute("eval.failure.source") == "judge-test"
    assert finding.label == "tool_output_misinterpretation"
    [usage] = [o for o in outputs if isinstance(o, EvaluatorUsage)]
    assert (usage.evaluator, usage.calls) == ("judge", len(requests))
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    assert result.score == 5 / 8  # five steps before the sixth
    assert (
        f"judged by judge-test (windows when long; {len(requests)} requests, 8 of 8 steps read)" in result.explanation
    )


def test_bisection_narrows_to_the_first_error_with_fewer_tokens():
    with OpenAIServer(handler=localization_judge()) as windows_server:
        localize(windows_server, long_run(marked={6}))
        windows_tokens = sum(within_cap(r) for r in judge_requests(windows_server))
    with OpenAIServer(handler=localization_judge()) as server:
        outputs = localize(server, long_run(marked={6}), long_runs="bisection")
        requests = judge_requests(server)
    names = [schema_of(r)[0] for r in requests]
    assert names[-1] == "failure_localization" and set(names[:-1]) == {"failure_localization_half"}
    assert all(within_cap(r) <= CAP for r in requests)
    last = [n for n, _, _ in shown_steps(requests[-1].messages()[-1]["content"])]
    assert 6 in last and 1 not in last  # the earlier half was left
    assert sum(within_cap(r) for r in requests) < windows_tokens
    [finding] = [o for o in outputs if isinstance(o, SpanFinding)]
    assert finding.span_id == _id(106)


def test_the_judge_is_shown_the_evidence_and_its_blame_joins_it():
    with OpenAIServer(handler=localization_judge()) as server:
        outputs = localize(server, long_run(marked={6}, failing_tool=2))
        [first, *_] = judge_requests(server)
    assert (
        f"Errors already found from the spans:\n- span {_id(102).hex()}: service_error:"
        in first.messages()[-1]["content"]
    )
    findings = [o for o in outputs if isinstance(o, SpanFinding)]
    assert [(f.span_id, f.label, f.attribute("eval.failure.source")) for f in findings] == [
        (_id(102), "service_error", "evidence"),
        (_id(106), "tool_output_misinterpretation", "judge-test"),
    ]


def test_when_the_judge_fails_the_evidence_stands_and_the_explanation_says_why():
    with OpenAIServer(handler=lambda request: ErrorReply(400, "bad request")) as server:
        outputs = localize(server, long_run(marked={6}, failing_tool=2))
    findings = [o for o in outputs if isinstance(o, SpanFinding)]
    assert [f.span_id for f in findings] == [_id(102)]
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    assert result.label == "service_error"
    assert re.search(r"; the judge stopped \(\w+: ", result.explanation)


def test_a_cap_without_room_for_steps_is_refused_at_config_time():
    with pytest.raises(NoRoom, match="raise it to"):
        check_room(3_000)
    with pytest.raises(ValueError, match="max_input_tokens 3000 is too small"):
        FailureLocalizationConfig(max_input_tokens=3_000)


@pytest.mark.parametrize("long_runs", ["windows", "bisection"])
def test_on_the_longest_trail_run_every_call_fits_the_cap(long_runs):
    from tests.support.trail import trail_traces

    run = max(trail_traces(TRAIL), key=lambda trace: len(trace.model_dump_json()))
    cap = CAP  # the run does not fit one call at this cap
    with OpenAIServer(handler=localization_judge(marker="error")) as server:

        async def go():
            from spanscore.processors.judge_metrics.config import build_judge

            judge = build_judge({"model": "judge-test", "base_url": server.base_url, "api_key": "k"})
            try:
                return await Localizer(judge, long_runs, cap, 1_000).localize(run, [])
            finally:
                await judge.close()

        judged = asyncio.run(go())
        requests = judge_requests(server)
    sizes = [within_cap(r) for r in requests]
    assert requests and max(sizes) <= cap
    steps = len([s for s in run.steps if s.from_span])
    if long_runs == "windows":
        assert judged.steps_read == steps and len(requests) >= 2
    else:
        assert judged.steps_read < steps


def test_the_smallest_cap_the_docs_give_is_the_one_refused_below():
    low, high = 1, 100_000  # check_room passes at high, not at low
    while high - low > 1:
        middle = (low + high) // 2
        try:
            check_room(middle)
            high = middle
        except NoRoom:
            low = middle
    docs = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert f"with the smallest value that works ({high:,} tokens)" in " ".join(docs.split())


def test_past_the_judges_budget_the_evidence_stands_and_the_explanation_says_so():
    with OpenAIServer(handler=localization_judge()) as server:
        config = FailureLocalizationConfig(
            when="always",
            max_input_tokens=CAP,
            judge={
                "model": "judge-test",
                "base_url": server.base_url,
                "api_key": "k",
                "cache": {"enabled": False},
                "budget": {"requests_per_hour": 2},
            },
        )

        async def run():
            processor = FailureLocalization("failure_localization", config)
            await processor.start()
            try:
                return [await processor.process_trace(long_run({6}, failing_tool=2), None) for _ in range(2)]
            finally:
                await processor.shutdown(0.0)

        first, second = asyncio.run(run())
        sent = len(judge_requests(server))
    assert sent == 2  # the budget's two requests, both on the first run
    [result] = [o for o in second if isinstance(o, MetricResult)]
    assert result.label == "service_error"  # the evidence's
    assert "; the judge's budget is spent, the rest is evidence only" in result.explanation
    assert [f.span_id for f in second if isinstance(f, SpanFinding)] == [_id(102)]
    assert _id(106) in [f.span_id for f in first if isinstance(f, SpanFinding)]
