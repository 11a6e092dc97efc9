"""Five TRAIL traces (tests/fixtures/trail, MIT) scored by `spanscore score` with a loopback
OpenAI-protocol judge whose answer is set per trace: what `spanscore agree` is tested and
shown on. The judge is a fake, so agreement figures from these files show the plumbing,
not any model's judgment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.judge_answers import answer_for, schema_of
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.trail import TRAIL as TRACES
from tests.support.trail import trail_traces

ROOT = Path(__file__).resolve().parents[2]
ANNOTATIONS = TRACES.with_name("gaia-5.annotations.jsonl")
# The metrics the built-in TRAIL mapping compares with people's scores.
METRICS = ("plan_adherence", "plan_quality", "task_completion")


def questions() -> dict[str, str]:
    """Each fixture trace's user input (the GAIA question), by trace id."""
    return {trace.trace_id: trace.user_input for trace in trail_traces()}


def annotations() -> dict[str, dict]:
    rows = [json.loads(line) for line in ANNOTATIONS.read_text().splitlines()]
    return {row["trace_id"]: row for row in rows}


def judge_scores() -> dict[str, float]:
    """The judge's score per trace: the people's reliability score put on 0–1 for the first
    three traces (by id), the opposite end for the last two: a judge right on 3 of 5."""
    people = {t: (a["scores"][0]["reliability_score"] - 1) / 4 for t, a in annotations().items()}
    return {t: (people[t] if i < 3 else 1.0 - people[t]) for i, t in enumerate(sorted(people))}


def score_trail(folder: Path, trials: int = 3) -> Path:
    """scored.jsonl in `folder`: the five traces scored with METRICS, `trials` times each."""
    asked = questions()
    # The questions share a long preamble: each is told apart by the start of its own part.
    preamble = len(os.path.commonprefix(list(asked.values())))
    by_question = {asked[t][preamble:].split("\n")[0][:60]: score for t, score in judge_scores().items()}

    def judge(request: RecordedRequest) -> Reply:
        _, schema = schema_of(request)
        prompt = request.messages()[-1]["content"]
        score = next(s for q, s in by_question.items() if q in prompt)
        return Reply(content=json.dumps(answer_for(schema, score)), prompt_tokens=100, completion_tokens=20)

    with OpenAIServer(handler=judge) as server:
        config = folder / "config.yaml"
        metrics = ", ".join(f"{m}: {{enabled: {str(m in METRICS).lower()}}}" for m in METRIC_NAMES)
        config.write_text(
            "receivers: {otlp: {}}\n"
            "processors:\n"
            f"  judge_metrics: {{judge: {{model: loopback-judge, base_url: '{server.base_url}', api_key: k}}, "
            f"trials: {trials}, early_stop: false, metrics: {{{metrics}}}}}\n"
            "exporters: {debug: {}}\n"
            "service: {pipelines: {traces: {receivers: [otlp], processors: [assembler, judge_metrics], "
            "exporters: [debug]}}}\n"
        )
        out = folder / "scored.jsonl"
        result = subprocess.run(
            [sys.executable, "-m", "spanscore", "score", str(TRACES), "-o", str(out), "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr
    return out
