"""Cost of the `checks` processor: microseconds per check per span, on captured traces.

    python bench/checks.py [--rounds 7]

Workload: the traces of captured agent frameworks (tests/fixtures/spans/frameworks:
LangChain RAG, LangGraph, OpenAI Agents SDK, Vercel AI), each checked by the config of
docs/metrics.md ("Checks without a model") plus a context regex: a not_regex and a no_pii
on the trace's output, a json_schema and a max_tokens on each model call, a max_duration
on each tool call, a tool_error_rate on the trace. The traces are normalized once before
timing: the normalized view is built once per trace and shared by every processor
(`bench/agent_trace.py` times it), so what is timed is what `checks` adds. Printed per
check: the checks made (results; a span without the field makes none), and microseconds
per check; then the whole config per trace. Then checks `on: session` (the trace's text
checks over every turn, a json_schema on every answer, the session's tokens, duration and
tool error rate), each capture's traces one session: microseconds per trace for the part
a turn leaves, and per session for the result at its close. A figure is the best of
`--rounds` rounds.

Then the checks against an eval suite's expected output: a dataset made of the captured
traces (a case per distinct first user message, its expected response the trace's final
output), `equals` and `contains` on each trace, and the look-up that finds a trace's
expected output (processors/expected_output.py) on its own: a trace without a session
(the case key searched in its attributes, the first message looked up) and a session's
later trace (the session's join read back).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.core.session import Session, TraceSummary  # noqa: E402
from spanscore.processors.agent_trace import agent_trace_of, span_views_of  # noqa: E402
from spanscore.processors.checks import (  # noqa: E402
    Checks,
    ChecksConfig,
    check_session,
    check_trace,
    turn_part,
)
from spanscore.processors.expected_output import ExpectedOutput  # noqa: E402
from tests.support.agent_fixtures import SPANS_DIR  # noqa: E402
from tests.support.otlp_json import read_requests  # noqa: E402
from tests.support.rag_trace import traces_of  # noqa: E402

CAPTURES = ("langchain_rag", "langgraph", "openai_agents_sdk", "vercel_ai")
METRICS = {
    "no_refund": {"field": "output", "not_regex": "(?i)refund"},
    "no_secrets": {"field": "output", "no_pii": True},
    "cited_policy": {"field": "context", "regex": r"(?i)\b(policy|days?)\b"},
    "json_answers": {"on": "llm", "field": "output", "json_schema": {"type": "object", "required": ["answer"]}},
    "short_calls": {"on": "llm", "max_tokens": 800},
    "fast_tools": {"on": "tool", "max_duration": "2s"},
    "tool_errors": {"tool_error_rate": {"max": 0.2}},
}

# The trace's checks read over every turn, and the span checks over the whole session.
SESSION_METRICS = {
    **{name: {**METRICS[name], "on": "session"} for name in ("no_refund", "no_secrets", "cited_policy", "tool_errors")},
    "json_answers": {"on": "session", "field": "output", "json_schema": {"type": "object", "required": ["answer"]}},
    "session_tokens": {"on": "session", "max_tokens": 5000},
    "session_time": {"on": "session", "max_duration": "5m"},
}


def best_seconds(run, rounds: int, min_round_s: float = 0.2) -> tuple[float, int]:
    """The best time per call of `run` over `rounds` rounds of at least `min_round_s`."""
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            run()
        if time.perf_counter() - start >= min_round_s:
            break
        calls *= 2
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        best = min(best, (time.perf_counter() - start) / calls)
    return best, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    traces = [t for name in CAPTURES for t in traces_of(*read_requests(SPANS_DIR / "frameworks" / f"{name}.jsonl"))]
    for trace in traces:  # built once, as every processor of the pipeline shares them
        agent_trace_of(trace)
        span_views_of(trace)
    config = ChecksConfig.model_validate({"metrics": METRICS})
    spans = sum(1 for trace in traces for _ in trace.spans())
    print(f"{len(traces)} captured traces ({', '.join(CAPTURES)}), {spans} spans\n")
    print(f"{'check':<14} {'kind':<16} {'checks':>6} {'µs/check':>9}")
    for name, settings in config.metrics.items():
        made = sum(len(check_trace(name, settings, trace)) for trace in traces)

        def run(name=name, settings=settings) -> None:
            for trace in traces:
                check_trace(name, settings, trace)

        seconds, _ = best_seconds(run, args.rounds)
        per_check = seconds / made * 1e6 if made else float("nan")
        print(f"{name:<14} {settings.check:<16} {made:>6} {per_check:>9.1f}")
    processor = Checks("checks", config)
    loop = asyncio.new_event_loop()

    def whole() -> None:
        for trace in traces:
            loop.run_until_complete(processor.process_trace(trace, None))

    seconds, _ = best_seconds(whole, args.rounds)
    print(f"\nthe {len(METRICS)} checks, per trace: {seconds / len(traces) * 1e6:.0f} µs (an event-loop call each)")
    sessions = [traces_of(*read_requests(SPANS_DIR / "frameworks" / f"{name}.jsonl")) for name in CAPTURES]
    for turns in sessions:
        for trace in turns:
            agent_trace_of(trace)
            span_views_of(trace)
    session_costs(sessions, args.rounds)
    expected_outputs(traces, args.rounds)


def session_costs(sessions, rounds: int) -> None:
    """The checks that take `on: session`, each capture's traces one session."""
    config = ChecksConfig.model_validate({"metrics": SESSION_METRICS})
    traces = [trace for turns in sessions for trace in turns]
    print(f"\non: session, {len(sessions)} sessions of {len(traces)} traces")
    print(f"{'check':<14} {'kind':<16} {'µs/turn':>8} {'µs/close':>9}")
    for name, settings in config.metrics.items():
        parts = [[turn_part(settings, trace) for trace in turns] for turns in sessions]

        def keep(settings=settings) -> None:
            for trace in traces:
                turn_part(settings, trace)

        def close(name=name, settings=settings, parts=parts) -> None:
            for session_parts in parts:
                check_session(name, settings, session_parts)

        per_turn, _ = best_seconds(keep, rounds)
        per_close, _ = best_seconds(close, rounds)
        print(
            f"{name:<14} {settings.check:<16} {per_turn / len(traces) * 1e6:>8.1f} "
            f"{per_close / len(sessions) * 1e6:>9.1f}"
        )


def expected_outputs(traces, rounds: int) -> None:
    cases = {}
    for trace in traces:
        run = agent_trace_of(trace)
        if run.user_input and run.final_output:
            case = {"id": f"case-{len(cases)}", "turns": [{"message": run.user_input.strip()}]}
            case["turns"][0]["expected_response"] = run.final_output.strip()
            cases.setdefault(run.user_input.strip(), case)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "suite.jsonl"
        path.write_text("\n".join(json.dumps(case) for case in cases.values()), encoding="utf-8")
        config = ChecksConfig.model_validate(
            {
                "dataset": str(path),
                "metrics": {
                    "same_answer": {"field": "output", "equals": "expected_output", "ignore_case": True},
                    "mentions_answer": {"field": "output", "contains": "expected_output"},
                },
            }
        )
    lookup = Checks("checks", config).expected
    assert lookup is not None
    dataset = lookup.dataset
    found = [lookup.of(trace, None) for trace in traces]
    joined = sum(isinstance(f, ExpectedOutput) for f in found)
    print(f"\nexpected outputs: {len(dataset.cases)} cases; {joined} of {len(traces)} traces join one")
    seconds, _ = best_seconds(lambda: [lookup.of(trace, None) for trace in traces], rounds)
    print(f"{'look-up, a trace without a session':<44} {seconds / len(traces) * 1e6:>7.1f} µs/trace")
    session = Session("bench", resource=None, last_activity=0.0)  # type: ignore[arg-type]
    lookup.of(traces[0], session)
    session.traces.append(TraceSummary.of(traces[0]))
    seconds, _ = best_seconds(lambda: [lookup.of(trace, session) for trace in traces], rounds)
    print(f"{'look-up, a later trace of a session':<44} {seconds / len(traces) * 1e6:>7.1f} µs/trace")
    for name, settings in config.metrics.items():
        made = sum(len(check_trace(name, settings, trace, f)) for trace, f in zip(traces, found))

        def run(name=name, settings=settings) -> None:
            for trace, f in zip(traces, found):
                check_trace(name, settings, trace, f)

        seconds, _ = best_seconds(run, rounds)
        print(f"{name:<44} {seconds / made * 1e6:>7.1f} µs/check ({made} made, skips included)")


if __name__ == "__main__":
    main()
