"""Judge benchmark: calls, tokens and scored traces/s for the seven LLM-judge metrics.

    python bench/judge.py [--traces 400] [--latency-ms 100] [--concurrency 32]

A loopback server speaking the OpenAI chat-completions protocol runs in its own
process and answers every request after `--latency-ms`, with valid answers generated
from the request's JSON schema; token counts are the server's estimate (half the number of words)
of what it received and sent. The `judge_metrics` processor's plan scores agent-like
traces (the weather agent: two LLM calls, one tool call, a plan) through the real
client with `max_concurrency = --concurrency`, many traces in flight as in the
pipeline. For `per_metric` and `combined` it prints judge calls and tokens per trace,
beside the naive stage-by-stage count of 16 calls, and scored traces/s against the
bound concurrency / (latency x calls per trace). The cache is off: every call is real.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spanscore.processors.agent_trace import AgentTrace, Step, ToolCall, ToolDefinition  # noqa: E402
from spanscore.processors.judge_metrics.client import OpenAIJudge, RetryPolicy  # noqa: E402
from spanscore.processors.judge_metrics.planner import JudgePlan  # noqa: E402

NAIVE_CALLS = 16  # the seven metrics' stages asked one by one (docs/metrics.md, Judge calls)
SERVER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.judge_answers import schema_judge
from tests.support.openai_server import OpenAIServer
server = OpenAIServer(handler=schema_judge(score=0.8, fixed_usage=False))
server.chat_latency_s = {latency}
print(server.start(), flush=True)
sys.stdin.read()
server.stop()
"""


def weather_trace(i: int) -> AgentTrace:
    return AgentTrace(
        trace_id=f"{i:032x}",
        user_input=f"What's the weather in Paris? (conversation {i})",
        final_output="It is sunny and 22 C in Paris.",
        agent_name="weather_agent",
        available_tools=[ToolDefinition(name="get_weather", description="Get the current weather for a city.")],
        reasoning=["I will look up the current weather in Paris, then answer."],
        steps=[
            Step(
                kind="llm",
                name="chat",
                span_id="01" * 8,
                model="gpt-test",
                tool_calls=[ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"})],
                reasoning=["I will look up the current weather in Paris, then answer."],
            ),
            Step(
                kind="tool",
                name="get_weather",
                span_id="02" * 8,
                arguments={"city": "Paris"},
                result="Sunny, 22 C",
                tool_call_id="c1",
            ),
            Step(kind="llm", name="chat", span_id="03" * 8, model="gpt-test", result="It is sunny and 22 C in Paris."),
        ],
    )


async def run_mode(base_url: str, mode: str, traces: int, concurrency: int) -> dict[str, float]:
    judge = OpenAIJudge(
        model="bench-judge",
        base_url=base_url,
        api_key="bench",
        max_concurrency=concurrency,
        retry=RetryPolicy(max_retries=0),
        cache=None,
    )
    plan = JudgePlan(mode=mode)
    in_flight = asyncio.Semaphore(concurrency * 8)  # enough traces waiting to keep every judge slot busy
    totals = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "errors": 0}

    async def score(i: int) -> None:
        async with in_flight:
            results, usage = await plan.run(weather_trace(i), judge)
        for key in ("calls", "input_tokens", "output_tokens"):
            totals[key] += usage[key]
        totals["errors"] += sum(1 for r in results if r.error)

    await score(-1)  # one trace first: connection set up, structured-output mode settled
    totals.update(calls=0, input_tokens=0, output_tokens=0, errors=0)
    started = time.perf_counter()
    await asyncio.gather(*(score(i) for i in range(traces)))
    elapsed = time.perf_counter() - started
    await judge.close()
    return {
        **{k: v / traces for k, v in totals.items()},
        "traces_per_s": traces / elapsed,
        "max_calls": plan.max_calls(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=400)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    latency_s = args.latency_ms / 1000
    root = str(Path(__file__).resolve().parents[1])
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=root, latency=latency_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = server.stdout.readline().strip()
    try:
        print(
            f"judge answering after {args.latency_ms:.0f} ms, client concurrency {args.concurrency}, "
            f"{args.traces} traces per mode; naive stage-by-stage count: {NAIVE_CALLS} calls per trace"
        )
        for mode in ("per_metric", "combined"):
            f = asyncio.run(run_mode(base_url, mode, args.traces, args.concurrency))
            bound = args.concurrency / (latency_s * f["calls"])
            print(
                f"{mode}: {f['calls']:.2f} calls/trace (plan's maximum {f['max_calls']:.0f}), "
                f"{f['input_tokens']:.0f} input + {f['output_tokens']:.0f} output tokens/trace, "
                f"{f['errors']:.2f} errors/trace; {f['traces_per_s']:.1f} traces/s against a bound of "
                f"{bound:.1f} ({f['traces_per_s'] / bound:.0%})"
            )
    finally:
        server.stdin.close()
        server.wait(30)


if __name__ == "__main__":
    main()
