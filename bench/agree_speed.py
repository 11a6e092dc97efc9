"""How long `spanscore agree` takes on many labelled traces.

    python bench/agree_speed.py [--traces 10000] [--labels-per-trace 1] [--resamples 2000]

Writes a scored file of `--traces` root spans (one export request per line, as the file
exporter writes; each span carries one judge metric's score, label, explanation,
evaluator, revision, threshold and three trials' scores) and a labels file with a
person's verdict on each (a tenth of them labelled twice, by two people, for the human
ceiling), then times the whole command as a person runs it (`python -m spanscore agree
... --json OUT`) and, in process, each stage: reading the scored file, reading the
labels, joining, and the statistics with their bootstrap intervals.

The scores and verdicts are drawn at random (seeded) to agree about 80% of the time: the
figures are speed, not agreement.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from spanscore.offline import agreement  # noqa: E402
from spanscore.offline.human_labels import read_labels_file  # noqa: E402
from spanscore.offline.judge_scores import read_judge_scores  # noqa: E402
from tests.support.agreement_files import scored_root, trace_id, write_labels, write_scored  # noqa: E402

METRIC = "task_completion"


def write_inputs(folder: Path, traces: int, seed: int = 1) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    scores = rng.random(traces)
    spans = []
    for i, score in enumerate(scores, start=1):
        trials = ",".join(f"{min(1.0, max(0.0, score + d)):.2f}" for d in rng.normal(0, 0.05, 3))
        spans.append(
            scored_root(
                trace_id(i),
                METRIC,
                float(score),
                explanation="The agent answered the question it was asked, with the values the tool returned.",
                trial_scores=trials,
            )
        )
    scored = write_scored(folder / "scored.jsonl", spans)
    rows = []
    for i, score in enumerate(scores, start=1):
        agrees = rng.random() < 0.8
        judged_pass = score >= 0.5
        label = "pass" if judged_pass == agrees else "fail"
        rows.append({"trace_id": trace_id(i), "metric": METRIC, "label": label, "annotator": "alice", "note": "ok"})
        if i % 10 == 0:
            rows.append({"trace_id": trace_id(i), "metric": METRIC, "label": label, "annotator": "bob"})
    labels = write_labels(folder / "labels.jsonl", rows)
    return scored, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        folder = Path(workdir)
        scored, labels = write_inputs(folder, args.traces)
        sizes = scored.stat().st_size / 1e6, labels.stat().st_size / 1e6
        print(f"{args.traces:,} scored traces ({sizes[0]:.1f} MB), {sizes[1]:.1f} MB of labels")
        started = time.perf_counter()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "spanscore",
                "agree",
                str(scored),
                "--labels",
                str(labels),
                "--json",
                str(folder / "agree.json"),
                "--resamples",
                str(args.resamples),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        whole = time.perf_counter() - started
        if result.returncode != 0:
            sys.exit(result.stderr)
        [report] = json.loads((folder / "agree.json").read_text())["results"]
        kappa = report["kappa"]["estimate"]
        print(f"spanscore agree, the whole command: {whole:.2f} s (n {report['n']:,}, κ {kappa:.3f})")
        stages = {}
        started = time.perf_counter()
        spans = read_judge_scores([scored])
        stages["read the scored file"] = time.perf_counter() - started
        started = time.perf_counter()
        human = read_labels_file(labels, [])
        stages["read the labels"] = time.perf_counter() - started
        started = time.perf_counter()
        joined = agreement.join(human, spans)
        stages["join"] = time.perf_counter() - started
        started = time.perf_counter()
        agreement.compare(joined.groups[0], args.resamples, 0)
        stages[f"statistics ({args.resamples:,} resamples)"] = time.perf_counter() - started
        for stage, seconds in stages.items():
            print(f"  {stage:<32} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
