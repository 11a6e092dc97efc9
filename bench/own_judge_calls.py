"""Judge calls per trace with two judge metrics of your own beside the built-ins.

    python bench/own_judge_calls.py [--trace examples/weather-agent.json]

The config: the seven built-in judge metrics (their defaults) and two metrics of your
own, `refund_policy` (binary, on trace) and `politeness` (a 1-5 scale, on each model
call). Each trace of the file goes through the `judge_metrics` processor in `per_metric`
and in `combined` mode, judged by a loopback server speaking the OpenAI protocol that
answers every request from its schema. It prints the requests the server received per
trace and by schema name, and `eval.judge.calls`. The answers are generated, so the
figures are of the plumbing (how many calls go out), not of any judge's quality.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from spanscore.core.otlp_json import decode_request  # noqa: E402
from spanscore.core.usage import EvaluatorUsage  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402
from spanscore.processors.judge_metrics.config import build_judge  # noqa: E402
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig  # noqa: E402
from tests.support.judge_answers import schema_judge, schema_of  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402

OWN = {
    "refund_policy": {"prompt": "Does the reply avoid promising a refund?\n{output}", "output": "binary"},
    "politeness": {
        "prompt": "How polite is this reply, 1 (rude) to 5 (very polite)?\n{output}",
        "output": {"scale": [1, 5]},
        "on": "llm",
    },
}


def traces(path: Path):
    assembler = Assembler(PipelineSettings())
    assembler.add(decode_request(path.read_bytes()), now=0.0)
    return sorted(assembler.pop_all(), key=lambda trace: trace.start_time_unix_nano)


async def judge_file(path: Path, mode: str, base_url: str) -> list[int]:
    judge = {"model": "bench-judge", "base_url": base_url, "api_key": "bench", "cache": {"enabled": False}}
    config = JudgeMetricsConfig.model_validate({"judge": judge, "mode": mode, "metrics": OWN})
    processor = JudgeMetrics("judge_metrics", config)
    processor.judge = build_judge(config.judge)
    calls = []
    try:
        for trace in traces(path):
            outputs = await processor.process_trace(trace, None)
            calls.append(sum(o.calls for o in outputs if isinstance(o, EvaluatorUsage)))
    finally:
        await processor.shutdown(0.0)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=ROOT / "examples" / "weather-agent.json")
    args = parser.parse_args()
    print(f"{args.trace.name}: built-in judge metrics + refund_policy (binary, trace) + politeness (1-5, llm)")
    print("loopback judge answering from the schema: figures of the plumbing, not of a judge's quality")
    for mode in ("per_metric", "combined"):
        with OpenAIServer(handler=schema_judge()) as server:
            calls = asyncio.run(judge_file(args.trace, mode, server.base_url))
            requests = server.requests_to("/chat/completions")
        by_schema = Counter(schema_of(request)[0] for request in requests)
        print(
            f"{mode}: {len(requests) / len(calls):.1f} judge calls per trace "
            f"({len(requests)} for {len(calls)} traces; eval.judge.calls {calls}); "
            f"by call: {', '.join(f'{name} {count}' for name, count in sorted(by_schema.items()))}"
        )


if __name__ == "__main__":
    main()
