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

from spanscore.processors.judge_metrics.examples import load_examples
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from tests.support.trail_scored import ANNOTATIONS, METRICS, ROOT, annotations, judge_scores, score_trail


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    return score_trail(tmp_path_factory.mktemp("agree-trail"))


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


def test_the_examples_it_writes_are_a_judge_metrics_examples_file(scored, tmp_path):
    examples = tmp_path / "task_completion-examples.yaml"
    result = agree(
        scored, "--trail", ANNOTATIONS, "--metric", "task_completion", "--write-examples", examples, "--count", "3"
    )
    assert result.returncode == 0, result.stderr
    loaded = load_examples(str(examples), "task_completion")
    report = disagreements_of(scored, tmp_path)
    assert 0 < len(loaded.items) <= 3
    assert [item.trace_id for item in loaded.items] == [d["trace_id"] for d in report][: len(loaded.items)]
    for item in loaded.items:
        assert "user_input:" in item.excerpt and item.label == "fail"  # people gave these traces 2 of 5
        assert item.reason.startswith("reliability: ")
    # A config that gives it to the metric validates, and the metric's revision changes.
    config = tmp_path / "config.yaml"
    config.write_text(
        "receivers: {otlp: {}}\n"
        "processors:\n"
        "  judge_metrics: {judge: {model: m, base_url: 'http://127.0.0.1:9/v1'}, "
        f"metrics: {{task_completion: {{examples: {examples}}}}}}}\n"
        "exporters: {debug: {}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [judge_metrics], exporters: [debug]}}}\n"
    )
    validated = subprocess.run(
        [sys.executable, "-m", "spanscore", "validate", str(config)], capture_output=True, text=True, cwd=ROOT
    )
    assert validated.returncode == 0, validated.stderr
    judge = {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    plain = JudgeMetrics("j", JudgeMetricsConfig(judge=judge))
    taught = JudgeMetrics(
        "j", JudgeMetricsConfig(judge=judge, metrics={"task_completion": {"examples": str(examples)}})
    )
    assert taught.provenance("task_completion").revision != plain.provenance("task_completion").revision


def disagreements_of(scored: Path, tmp_path: Path) -> list[dict]:
    out = tmp_path / "disagreements.json"
    result = agree(scored, "--trail", ANNOTATIONS, "--metric", "task_completion", "--json", out)
    assert result.returncode == 0, result.stderr
    [report] = json.loads(out.read_text())["results"]
    return report["disagreements"]
