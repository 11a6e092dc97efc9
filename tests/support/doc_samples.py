"""The sample outputs in the docs, produced by real runs of the commands they show.

A fenced block right after a line `<!-- sample: NAME -->` in a Markdown file is the output
of `SAMPLES[NAME]`. tests/test_doc_samples.py holds every such block equal to a fresh
run; `python -m tests.support.doc_samples --write` rewrites the blocks from one.

What varies from run to run is masked before comparing: the trace id of a session's
`evaluate_session` carrier (random, as a span id is). What varies between machines is not
shown: a float attribute is rounded to `SHOWN_DIGITS` significant digits, as a float
printed in full can differ in its last digits where sums are ordered differently (and
tests/test_doc_samples.py holds that no sample shows one). Every run is offline: no judge
(OPENAI_* unset) and the `static` embedder, the base install's, whatever else is
installed. The commands run where a person types them from a checkout: a folder holding a
copy of examples/, with the very command lines the samples show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tests.support.processes import ROOT, SPANSCORE, run_default_on

MARKER = re.compile(r"^<!-- sample: ([a-z0-9-]+) -->$")
FENCE = re.compile(r"^```")
WEATHER = ROOT / "examples" / "weather-agent.json"
# A carrier's trace id is random; its line names it, and so may the docs.
CARRIER_LINE = re.compile(r"^(\$? ?trace )[0-9a-f]{32}( root='evaluate_session')", re.MULTILINE)
MASKED_ID = "<carrier trace id>"


def offline_environment() -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SPANSCORE_"))}
    return {**environ, "SPANSCORE_EMBEDDER": "static", "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True)
class Block:
    path: Path
    name: str
    start: int  # index of the first line inside the fence
    end: int  # index of the closing fence
    text: str


def blocks(path: Path) -> list[Block]:
    """The sample blocks of one Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        assert i + 1 < len(lines) and FENCE.match(lines[i + 1]), f"{path}:{i + 1}: a sample marker needs a fence next"
        end = next(j for j in range(i + 2, len(lines)) if FENCE.match(lines[j]))
        found.append(Block(path, marker.group(1), i + 2, end, "\n".join(lines[i + 2 : end]) + "\n"))
    return found


# A float printed in full (repr) can differ in its last digits between machines, as sums
# are ordered differently: a sample shows floats rounded, and none this long.
SHOWN_DIGITS = 6
LONG_FLOAT = re.compile(r"\b\d+\.\d{13,}\b")


def masked(text: str) -> str:
    return CARRIER_LINE.sub(rf"\g<1>{MASKED_ID}\g<2>", text)


class Runs:
    """The runs the samples come from, each made once, in `workdir`."""

    def __init__(self, workdir: Path):
        self.workdir = workdir

    @cached_property
    def collector(self) -> tuple[str, list[dict]]:
        """`spanscore run` with the default config, sent the sample session, stopped with
        SIGTERM: (what it printed, the spans it wrote to scored.jsonl)."""
        folder = self.workdir / "run"
        folder.mkdir()
        result = run_default_on(WEATHER, folder, offline_environment())
        assert result.returncode == 0, result.stderr
        scored = folder / "scored.jsonl"
        spans = [
            span
            for line in scored.read_text().splitlines()
            for rs in json.loads(line)["resourceSpans"]
            for ss in rs["scopeSpans"]
            for span in ss["spans"]
        ]
        return result.stdout, spans

    def command(self, *args: str, cwd: Path | None = None) -> str:
        """`spanscore args` as a person types it (in `cwd`, by default the checkout with its
        examples/), and what it printed on stdout."""
        result = subprocess.run(
            [*SPANSCORE, *args],
            cwd=cwd or self.checkout,
            capture_output=True,
            text=True,
            env=offline_environment(),
            timeout=300,
        )
        assert result.returncode in (0, 1), result.stderr
        return f"$ spanscore {' '.join(args)}\n{result.stdout}"

    @cached_property
    def checkout(self) -> Path:
        """Where the commands are typed: a copy of the checkout's examples/ and of the
        otel-config.yaml `score` reads there, so what the commands write lands beside them,
        not in the checkout."""
        folder = self.workdir / "checkout"
        shutil.copytree(ROOT / "examples", folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "otel-config.yaml", folder)
        return folder

    @cached_property
    def scored_candidate(self) -> str:
        """The suite's candidate recording scored into candidate.jsonl (the report sample's
        first command, which the compare sample relies on)."""
        return self.command(
            "score",
            "examples/suite-runs/candidate.jsonl.gz",
            "--dataset",
            "examples/suite-runs/suite.yaml",
            "-o",
            "candidate.jsonl",
            "--quiet",
        )


def _trace_lines(runs: Runs) -> str:
    stdout, _ = runs.collector
    return "".join(line + "\n" for line in stdout.splitlines() if line.startswith("trace "))


def _attributes(span: dict, keep: Callable[[str], bool]) -> str:
    lines = []
    for attribute in span["attributes"]:
        if keep(attribute["key"]):
            ((kind, value),) = attribute["value"].items()
            if kind == "doubleValue":
                value = float(f"{value:.{SHOWN_DIGITS}g}")
            lines.append(f"{attribute['key']} = {value}")
    return "\n".join(lines) + "\n"


def _root_scores(runs: Runs) -> str:
    _, spans = runs.collector
    root = next(s for s in spans if s["traceId"] == "5c0e5c0e000000000000000000000002" and "parentSpanId" not in s)
    # The sequence numbers (all 1, a first scoring) are left to docs/score-encoding.md.
    return _attributes(root, lambda key: key.startswith("eval.") and not key.endswith(".sequence"))


def _session_carrier(runs: Runs) -> str:
    _, spans = runs.collector
    carrier = next(s for s in spans if s["name"] == "evaluate_session")
    return _attributes(carrier, lambda key: not key.endswith((".revision", ".sequence")))


def _inspect_examples(runs: Runs) -> str:
    return runs.command("inspect", "examples/weather-agent.json", "examples/otlp-spec-trace.json")


def _inspect_retrieval(runs: Runs) -> str:
    return runs.command("inspect", "tests/fixtures/spans/rag/openinference.jsonl", cwd=ROOT)


def _inspect_retrieval_json(runs: Runs) -> str:
    printed = runs.command("inspect", "--json", "tests/fixtures/spans/rag/openinference.jsonl", cwd=ROOT)
    _, _, line = printed.partition("\n")
    retrieval = json.loads(line)["steps"][0]
    return printed.partition("\n")[0] + "\n" + json.dumps(retrieval, indent=2, ensure_ascii=False) + "\n"


def _score_rag(runs: Runs) -> str:
    """examples/rag-chatbot.json scored, and its two question runs as inspect shows them."""
    scored = runs.command("score", "examples/rag-chatbot.json", "-o", "rag-scored.jsonl", "--quiet")
    printed = runs.command("inspect", "rag-scored.jsonl")
    command, _, traces = printed.partition("\n")
    questions = [part.strip("\n") for part in traces.split("\n\n") if ".workflow' " in part]
    return scored + command + "\n" + "\n\n".join(questions) + "\n"


def _score_rag_explanation(runs: Runs) -> str:
    """The faithfulness explanation on the model span of examples/rag-chatbot.json's unfaithful answer."""
    runs.command("score", "examples/rag-chatbot.json", "-o", "rag-scored.jsonl", "--quiet")
    spans = [
        span
        for line in (runs.checkout / "rag-scored.jsonl").read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    failing = next(
        span
        for span in spans
        if span["name"] == "openai.chat"
        and {"key": "eval.faithfulness.label", "value": {"stringValue": "fail"}} in span["attributes"]
    )
    return _attributes(failing, lambda key: key == "eval.faithfulness.explanation")


def _inspect_carrier(runs: Runs) -> str:
    runs.collector  # noqa: B018 - the run writes the scored file
    printed = runs.command("inspect", "scored.jsonl", cwd=runs.workdir / "run")
    return next(part for part in printed.split("\n\n") if "root='evaluate_session'" in part).strip("\n") + "\n"


def _inspect_blamed(runs: Runs) -> str:
    scored = runs.command(
        "score",
        "examples/weather-agent-failed.json",
        "--dataset",
        "examples/weather-suite-no-judge.yaml",
        "-o",
        "scored.jsonl",
        "--quiet",
    )
    return scored + runs.command("inspect", "scored.jsonl")


def _report(runs: Runs) -> str:
    return runs.scored_candidate + runs.command(
        "report",
        "candidate.jsonl",
        "--dataset",
        "examples/suite-runs/suite.yaml",
        "--json",
        "summary.json",
        "-o",
        "report.html",
    )


def _report_span_level(runs: Runs) -> str:
    fixture = Path("tests/fixtures/spans/frameworks/langchain_rag.jsonl")  # typed from a checkout, as it is
    (runs.checkout / fixture).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / fixture, runs.checkout / fixture)
    return runs.command("score", str(fixture), "-o", "rag.jsonl", "--quiet") + runs.command("report", "rag.jsonl")


def _compare(runs: Runs) -> str:
    runs.scored_candidate  # noqa: B018 - the report sample's first command writes candidate.jsonl
    scored = runs.command(
        "score",
        "examples/suite-runs/baseline.jsonl.gz",
        "--dataset",
        "examples/suite-runs/suite.yaml",
        "-o",
        "baseline.jsonl",
        "--quiet",
    )
    return scored + runs.command("compare", "baseline.jsonl", "candidate.jsonl", "--max-tsr-drop", "0.05")


def _agree(runs: Runs) -> str:
    return runs.command(
        "agree",
        "examples/trail/gaia-5.scored.jsonl.gz",
        "--trail",
        "examples/trail/gaia-5.annotations.jsonl",
        "--metric",
        "task_completion",
    )


def _agree_own(runs: Runs) -> str:
    fixtures = Path("tests/fixtures/agree_own")  # typed from a checkout, as it is
    (runs.checkout / fixtures).mkdir(parents=True, exist_ok=True)
    for name in ("scored.jsonl", "labels.jsonl"):
        shutil.copy(ROOT / fixtures / name, runs.checkout / fixtures / name)
    return runs.command(
        "agree",
        str(fixtures / "scored.jsonl"),
        "--labels",
        str(fixtures / "labels.jsonl"),
        "--metric",
        "resolution",
    )


def _own_evaluators(runs: Runs) -> str:
    config = "examples/own-evaluators.yaml"
    scored = runs.command("score", "--config", config, "examples/rag-chatbot.json", "-o", "own.jsonl")
    return scored + runs.command("inspect", "own.jsonl")


SAMPLES: dict[str, Callable[[Runs], str]] = {
    "run-trace-lines": _trace_lines,
    "run-root-scores": _root_scores,
    "run-session-carrier": _session_carrier,
    "inspect-examples": _inspect_examples,
    "inspect-retrieval": _inspect_retrieval,
    "inspect-retrieval-json": _inspect_retrieval_json,
    "inspect-carrier": _inspect_carrier,
    "score-rag": _score_rag,
    "score-rag-explanation": _score_rag_explanation,
    "inspect-blamed": _inspect_blamed,
    "report": _report,
    "report-span-level": _report_span_level,
    "compare": _compare,
    "agree": _agree,
    "agree-own": _agree_own,
    "own-evaluators": _own_evaluators,
}


def documents() -> list[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*/README.md")])


def write(runs: Runs) -> list[str]:
    """Rewrite every sample block from `runs`; the names of the blocks that changed."""
    changed = []
    for path in documents():
        lines = path.read_text(encoding="utf-8").splitlines()
        for block in reversed(blocks(path)):
            fresh = SAMPLES[block.name](runs)
            if masked(fresh) != masked(block.text):
                lines[block.start : block.end] = fresh.rstrip("\n").split("\n")
                changed.append(f"{path.relative_to(ROOT)}: {block.name}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return changed


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.support.doc_samples --write")
    with tempfile.TemporaryDirectory() as workdir:
        for name in write(Runs(Path(workdir))) or ["(none)"]:
            print("rewrote", name)
