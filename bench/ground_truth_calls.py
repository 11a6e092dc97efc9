"""Judge requests per eval-suite attempt: naive against unbatched against batched.

    python bench/ground_truth_calls.py [--subgoals 4] [--turns 6] [--trials 5]

One attempt of `--turns` turns at a case of `--subgoals` subgoals, subgoal i completed by
turn i (the rest never are), judged through `GroundTruthJudge` by the real judge client
against a loopback OpenAI-protocol server answering from the transcript. Counted: the
HTTP requests the server received, per mode, against the naive count turns × subgoals ×
trials (every subgoal judged at every turn, every trial sent).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.processors.agent_trace import AgentTrace  # noqa: E402
from spanscore.processors.eval_dataset import Case  # noqa: E402
from spanscore.processors.ground_truth.judging import GroundTruthJudge  # noqa: E402
from spanscore.processors.judge_metrics.config import JudgeConfig, build_judge  # noqa: E402
from tests.support.ground_truth_judge import parts  # noqa: E402
from tests.support.judge_answers import schema_of  # noqa: E402
from tests.support.openai_server import OpenAIServer, Reply  # noqa: E402


def answer(request) -> Reply:
    name, schema = schema_of(request)
    _, data, instructions = parts(request)
    if name == "subgoals":
        keys = list(schema["properties"])
        texts = [re.search(rf"^- {key}: (.*)$", instructions, re.MULTILINE).group(1) for key in keys]
    else:
        keys, texts = [None], [re.search(r"^Subgoal: (.*)$", instructions, re.MULTILINE).group(1)]
    verdicts = [{"explanation": "-", "complete": re.search(r"marker-\d+", t).group(0) in data} for t in texts]
    return Reply(content=json.dumps(verdicts[0] if keys == [None] else dict(zip(keys, verdicts))))


async def requests_for(
    server: OpenAIServer, case: Case, turns: list[AgentTrace], trials: int, batched: bool, early_stop: bool
) -> int:
    before = len(server.requests)
    judge = GroundTruthJudge(
        build_judge(JudgeConfig(base_url=server.base_url, model="gpt-test", cache={"enabled": False})),
        trials=trials,
        early_stop=early_stop,
        batched=batched,
    )
    completed: set[int] = set()
    for turn in range(len(turns)):
        pending = [i for i in range(len(case.subgoals)) if i not in completed]
        if pending:
            verdicts = await judge.subgoal_verdicts(case, turns[: turn + 1], pending)
            completed |= {i for i, v in verdicts.items() if v.complete}
    await judge.judge.close()
    return len(server.requests) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subgoals", type=int, default=4)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    case = Case.model_validate(
        {
            "id": "bench",
            "user_instruction": "Plan a trip",
            "subgoals": [{"details": f"Mentions marker-{i}"} for i in range(args.subgoals)],
        }
    )
    turns = [
        AgentTrace(trace_id=f"{t:032x}", user_input=f"question {t}", final_output=f"answer marker-{t}")
        for t in range(args.turns)
    ]
    naive = args.turns * args.subgoals * args.trials
    print(
        f"{args.turns} turns, {args.subgoals} subgoals (subgoal i done at turn i), {args.trials} trials; "
        f"naive: {naive} requests"
    )
    with OpenAIServer(handler=answer) as server:
        for label, batched, early in (
            ("unbatched, all trials", False, False),
            ("unbatched, early stop", False, True),
            ("batched, all trials", True, False),
            ("batched, early stop", True, True),
        ):
            count = asyncio.run(requests_for(server, case, turns, args.trials, batched, early))
            print(f"{label:<24}{count:>6} requests ({count / naive:.0%} of naive)")


if __name__ == "__main__":
    main()
