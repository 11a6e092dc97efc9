"""`spanscore agree` end to end on real agent traces: five TRAIL traces (tests/fixtures/trail,
MIT) scored offline by `spanscore score` with a loopback OpenAI-protocol judge whose
answers are set per trace, then compared with TRAIL's human 1–5 scores, read from TRAIL's
own annotation file and from a labels file holding the same scores: the same report.

The judge here is a fake: the agreement figures show that the plumbing carries the right
numbers to the right place, not how well any model judges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spanscore.offline.otlp_files import read_requests
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import agent_trace_of
from tests.support.judge_answers import answer_for, schema_of
from tests.support.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.support.processes import ROOT

TRAIL = ROOT / "tests" / "fixtures" / "trail"
TRACES = TRAIL / "gaia-5.otlp.jsonl.gz"
ANNOTATIONS = TRAIL / "gaia-5.annotations.jsonl"
METRICS = ("plan_adherence", "plan_quality", "task_completion")


def questions() -> dict[str, str]:
    """Each fixture trace's user input (the GAIA question), by trace id."""
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for _, request in read_requests(TRACES, []):
        assembler.add(request, 0.0)
    return {trace.trace_id_hex: agent_trace_of(trace).user_input for trace in assembler.pop_all()}


def annotations() -> dict[str, dict]:
    return {json.loads(line)["trace_id"]: json.loads(line) for line in ANNOTATIONS.read_text().splitlines()}


# The judge's score per trace: the people's reliability score put on 0–1 for the first
# three traces, the opposite end for the last two: a judge right on 3 of 5.
def judge_scores() -> dict[str, float]:
    people = {t: (a["scores"][0]["reliability_score"] - 1) / 4 for t, a in annotations().items()}
    ordered = sorted(people)
    return {t: (people[t] if i < 3 else 1.0 - people[t]) for i, t in enumerate(ordered)}


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("agree-trail")
    by_question = {questions()[t][:200]: score for t, score in judge_scores().items()}

    def judge(request: RecordedRequest) -> Reply:
        _, schema = schema_of(request)
        prompt = request.messages()[-1]["content"]
        score = next(s for q, s in by_question.items() if q in prompt)
        return Reply(content=json.dumps(answer_for(schema, score)), prompt_tokens=100, completion_tokens=20)

    with OpenAIServer(handler=judge) as server:
        config = folder / "config.yaml"
        metrics = ", ".join(f"{m}: {{enabled: {str(m in METRICS).lower()}}}" for m in ALL_JUDGE_METRICS)
        config.write_text(
            "receivers: {otlp: {}}\n"
            "processors:\n"
            f"  judge_metrics: {{judge: {{model: loopback-judge, base_url: '{server.base_url}', api_key: k}}, "
            f"trials: 3, early_stop: false, metrics: {{{metrics}}}}}\n"
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


ALL_JUDGE_METRICS = (
    "task_completion",
    "tool_correctness",
    "argument_correctness",
    "step_efficiency",
    "confidence",
    "plan_adherence",
    "plan_quality",
)


def agree(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spanscore", "agree", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def comparable(results: list[dict]) -> list[dict]:
    """Results without where each label was read (file:line differs by source)."""
    return [
        {**r, "disagreements": [{k: v for k, v in d.items() if k != "source"} for d in r["disagreements"]]}
        for r in results
    ]


def test_trail_scores_and_a_labels_file_give_the_same_report(scored, tmp_path):
    from_trail = tmp_path / "trail.json"
    result = agree(scored, "--trail", ANNOTATIONS, "--json", from_trail)
    assert result.returncode == 0, result.stderr
    # The same scores as a labels file: TRAIL's mapping by hand.
    names = {"instruction_adherence": "plan_adherence", "plan_opt": "plan_quality", "reliability": "task_completion"}
    rows = [
        {
            "trace_id": trace,
            "metric": metric,
            "score": annotation["scores"][0][f"{name}_score"],
            "scale": "1-5",
            "annotator": "trail",
            "note": f"{name}: {annotation['scores'][0][f'{name}_reasoning']}",
        }
        for trace, annotation in annotations().items()
        for name, metric in names.items()
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(row) + "\n" for row in rows))
    from_file = tmp_path / "file.json"
    result = agree(scored, "--labels", labels, "--json", from_file)
    assert result.returncode == 0, result.stderr
    trail_results = json.loads(from_trail.read_text())["results"]
    assert comparable(trail_results) == comparable(json.loads(from_file.read_text())["results"])
    assert sorted(r["metric"] for r in trail_results) == sorted(METRICS)


def test_the_report_carries_the_judges_scores_and_the_peoples(scored, tmp_path):
    out = tmp_path / "a.json"
    result = agree(scored, "--trail", ANNOTATIONS, "--metric", "task_completion", "--json", out)
    assert result.returncode == 0, result.stderr
    [report] = json.loads(out.read_text())["results"]
    assert report["evaluator"] == "loopback-judge" and len(report["revision"]) == 12
    assert report["n"] == 5 and report["scale"] == "1-5"
    people = {t: a["scores"][0]["reliability_score"] for t, a in annotations().items()}
    judge = judge_scores()
    # Every disagreement pairs this trace's judge score with this trace's human score.
    for d in report["disagreements"]:
        assert d["judge_score"] == pytest.approx(judge[d["trace_id"]])
        assert d["human_score"] == people[d["trace_id"]]
    # The scale's confusion: each person's point against the judge's score mapped to a point.
    expected = {str(p): dict.fromkeys(map(str, range(1, 6)), 0) for p in range(1, 6)}
    for trace, point in people.items():
        expected[str(point)][str(round(1 + 4 * judge[trace]))] += 1
    assert report["scale_confusion"] == expected
    # Three trials a trace, all answered alike: no spread.
    assert report["consistency"]["items"] == 5 and report["consistency"]["trials"] == 3
    assert report["consistency"]["mean_stdev"] == 0.0 and report["consistency"]["split_rate"] == 0.0
    assert report["best_threshold"]["configured"] == 0.5
