"""Each processor says who scores its metrics and by which revision of their definition:
the judge model and a hash of the rubric and its settings, the embedder, or code; the
dataset is part of a ground-truth metric's revision."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from spanscore.core.provenance import CODE_PROVENANCE, stable_repr
from spanscore.processors.embedding_metrics import EmbeddingMetrics, EmbeddingMetricsConfig
from spanscore.processors.ground_truth.processor import GroundTruth, GroundTruthConfig
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from spanscore.processors.session_metrics import SessionMetrics, SessionMetricsConfig
from tests.support.scored_suite import DATASET

JUDGE = {"model": "judge-model", "base_url": "http://127.0.0.1:9/v1"}


def judge_metrics(**config) -> JudgeMetrics:
    return JudgeMetrics("judge_metrics", JudgeMetricsConfig(judge=JUDGE, **config))


def test_judge_metrics_are_by_the_judge_model_under_a_rubric_revision():
    processor = judge_metrics()
    task, tools = processor.provenance("task_completion"), processor.provenance("tool_correctness")
    assert task.evaluator == tools.evaluator == "judge-model" and task.judged and tools.judged
    assert task.revision != tools.revision  # different rubrics
    assert judge_metrics().provenance("task_completion") == task  # stable
    # A setting that changes the scores is a new revision; the judge's address is not.
    assert (
        judge_metrics(metrics={"task_completion": {"threshold": 0.8}}).provenance("task_completion").revision
        != task.revision
    )
    assert judge_metrics(mode="combined").provenance("task_completion").revision != task.revision
    assert judge_metrics(redact=False).provenance("task_completion").revision != task.revision  # what it sees
    assert judge_metrics(max_input_tokens=16_000).provenance("task_completion").revision != task.revision
    moved = JudgeMetrics("judge_metrics", JudgeMetricsConfig(judge={**JUDGE, "base_url": "http://10.0.0.1/v1"}))
    assert moved.provenance("task_completion") == task


def test_embedding_metrics_are_by_the_embedder():
    processor = EmbeddingMetrics("embedding_metrics", EmbeddingMetricsConfig(embedder={"type": "hashing"}))

    async def started():
        await processor.start()
        try:
            return processor.provenance("coherence")
        finally:
            await processor.shutdown(0)

    provenance = asyncio.run(started())
    assert provenance.evaluator.startswith("hashing-v")
    assert provenance != CODE_PROVENANCE and not provenance.judged


def test_session_metrics_are_code():
    processor = SessionMetrics("session_metrics", SessionMetricsConfig())
    assert processor.provenance("agent_reliability") == CODE_PROVENANCE


def test_ground_truth_revisions_follow_the_dataset(tmp_path):
    dataset = tmp_path / "suite.yaml"
    dataset.write_text(DATASET)

    def provenance(metric: str):
        return GroundTruth("ground_truth", GroundTruthConfig(dataset=str(dataset))).provenance(metric)

    before = provenance("tool_call_accuracy")
    assert before.evaluator == "code" and not before.judged  # no judge: the expected calls are compared exactly
    dataset.write_text(DATASET.replace("value: Oslo", "value: Bergen"))
    assert provenance("tool_call_accuracy").revision != before.revision


def test_a_revision_is_the_same_in_every_process():
    # String hashes, and so the order of a set of strings, differ between processes: the
    # rubrics' sets of extraction fields must not make the revision differ with them.
    program = (
        "from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig\n"
        "from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES\n"
        "m = JudgeMetrics('j', JudgeMetricsConfig(judge={'model': 'm', 'base_url': 'http://127.0.0.1:9/v1'}))\n"
        "print(' '.join(m.provenance(name).revision for name in METRIC_NAMES))\n"
    )
    printed = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(printed) == 1, printed


def test_stable_repr_is_repr_but_for_sets():
    value = {"a": [1, (2,), "x"], "b": (), "c": {"k": None}}
    assert stable_repr(value) == repr(value)
    assert stable_repr(frozenset({"task", "outcome"})) == "frozenset({'outcome', 'task'})"
    assert stable_repr({"n": {"b", "a"}}) == "{'n': set({'a', 'b'})}"
