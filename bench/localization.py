"""Where did the agent go wrong? failure_localization against people's labels: TRAIL and Who&When.

    python bench/localization.py [--trail DIR] [--whowhen PATH]

DIR holds a TRAIL set: `*.otlp.jsonl.gz` (one trace per line, OTLP/JSON) and
`*.annotations.jsonl` (people's errors per trace: span id, category, impact); PATH is
Who&When's archive (`.tar.gz`) or a folder of its run files. The defaults are the
subsets in tests/fixtures (5 TRAIL traces, 3 Who&When runs); the full sets are read the
same way.

Every trace is localized with `when: always` (TRAIL's traces are labelled whether or not
a metric failed them), then scored as each benchmark's own scorer scores:
- TRAIL: location accuracy, joint location+category accuracy (means over traces) and the
  category F1 weighted over categories; here also the location accuracy of the
  system-execution errors alone and the precision of the blamed spans (the share that
  people blamed too);
- Who&When: the first blamed step of each run as the prediction; agent-level and
  step-level accuracy, and step-level within ±1, ±2, ±3.
Methods: evidence only (no judge). The judge methods (whole run, windows, bisection) are
not built yet; they are not printed. Published figures are printed beside for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.whowhen_otlp import RunError, convert_run, read_runs, step_span_id  # noqa: E402
from spanscore.core.otlp_json import decode_request  # noqa: E402
from spanscore.core.span_finding import SpanFinding  # noqa: E402
from spanscore.core.trace import Trace  # noqa: E402
from spanscore.offline.localization_scoring import category_key, trail_scores, whowhen_scores  # noqa: E402
from spanscore.offline.otlp_files import read_requests  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402
from spanscore.processors.failure_localization import FailureLocalization, FailureLocalizationConfig  # noqa: E402
from spanscore.processors.localization.taxonomy import taxonomy  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
# Published, for scale (not comparable as is: other models, other prompts, all of TRAIL's GAIA split).
TRAIL_PUBLISHED = "TRAIL GAIA joint accuracy, published: Gemini 2.5 Pro 0.18, o3 0.09, GPT-4.1 0.03"
WHOWHEN_PUBLISHED = (
    "Who&When, published (GPT-4o, all at once): agent-level 54.3% / 55.2%, step-level 12.5% / 5.3% "
    "(Algorithm-Generated / Hand-Crafted); step by step 25.5% / 7.0%; random step-level 19.1% / 4.2%"
)


def localizer() -> FailureLocalization:
    return FailureLocalization("failure_localization", FailureLocalizationConfig(when="always", max_errors=1000))


def localize(traces: list[Trace]) -> tuple[dict[str, list[SpanFinding]], float]:
    """The findings per trace id (hex), and the seconds it took."""
    processor = localizer()
    found: dict[str, list[SpanFinding]] = {}
    started = time.perf_counter()
    for trace in traces:
        outputs = asyncio.run(processor.process_trace(trace, None))
        found[trace.trace_id.hex()] = [o for o in outputs if isinstance(o, SpanFinding)]
    return found, time.perf_counter() - started


def assemble(requests) -> list[Trace]:
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for request in requests:
        assembler.add(request, 0.0)
    return sorted(assembler.pop_all(), key=lambda trace: trace.trace_id)


def trail(directory: Path) -> None:
    [spans_file] = sorted(directory.glob("*.otlp.jsonl*"))
    [labels_file] = sorted(directory.glob("*.annotations.jsonl"))
    problems: list[str] = []
    traces = assemble(request for _, request in read_requests(spans_file, problems))
    if problems:
        raise SystemExit(f"{spans_file}: {problems[0]}")
    labels = {}
    for line in labels_file.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            labels[record["trace_id"]] = [(e["location"], e["category"]) for e in record["errors"]]
    found, seconds = localize(traces)
    pairs = []
    for trace in traces:
        trace_id = trace.trace_id.hex()
        predicted = [(f.span_id.hex(), f.label) for f in found[trace_id]]
        pairs.append((labels.get(trace_id, []), predicted))
    scores = trail_scores(pairs)
    gold_errors = sum(len(gold) for gold, _ in pairs)
    spans = sum(len(list(trace.spans())) for trace in traces)
    print(f"TRAIL: {len(traces)} traces ({spans} spans) from {spans_file.name}, {gold_errors} labelled errors")
    print(f"  evidence only (no judge), {seconds * 1000 / max(1, len(traces)):.1f} ms a trace, 0 judge requests:")
    print(
        f"    location accuracy {scores.location_accuracy:.3f}   joint accuracy {scores.joint_accuracy:.3f}   "
        f"weighted category F1 {scores.weighted_f1:.3f}"
    )
    located = Counter()
    labelled = Counter()
    blamed = also_by_people = 0
    for gold, predicted in pairs:
        predicted_spans = {span for span, _ in predicted}
        gold_spans = {span for span, _ in gold}
        blamed += len(predicted_spans)
        also_by_people += len(predicted_spans & gold_spans)
        for span, label in gold:
            group = taxonomy()[category_key(label)].group if not category_key(label).startswith("?") else "?"
            labelled[group] += 1
            located[group] += span in predicted_spans
    for group in taxonomy().groups:
        if labelled[group]:
            print(
                f"    {group.replace('_', ' ')} errors located: {located[group]} of {labelled[group]} "
                f"({located[group] / labelled[group]:.1%})"
            )
    total_located = sum(located.values())
    print(f"    all errors located: {total_located} of {gold_errors} ({total_located / max(1, gold_errors):.1%})")
    print(
        f"    precision: {also_by_people} of {blamed} blamed spans were blamed by people too "
        f"({also_by_people / max(1, blamed):.1%})"
    )
    by_category = Counter(f.label for findings in found.values() for f in findings)
    print("    blamed by category: " + (", ".join(f"{c} {n}" for c, n in by_category.most_common()) or "none"))
    print(f"  {TRAIL_PUBLISHED}")


def whowhen_runs(path: Path):
    if path.is_dir():
        for file in sorted(path.glob("*.json")):
            yield file.stem, json.loads(file.read_text(encoding="utf-8"))
    else:
        for _, run_id, run in read_runs(path):
            yield run_id, run


def whowhen(path: Path) -> None:
    runs = list(whowhen_runs(path))
    requests, labelled = [], {}
    for run_id, run in runs:
        try:
            requests.append(decode_request(json.dumps(convert_run(run, run_id))))
        except RunError as exc:
            raise SystemExit(f"{path}: {exc}") from None
        labelled[run_id] = (str(run.get("mistake_agent", "")), int(run.get("mistake_step", -1)))
    traces = assemble(requests)
    found, seconds = localize(traces)
    results = []
    predicted_runs = 0
    for run_id, _ in runs:
        trace = next(t for t in traces if any(span.span_id.hex() == step_span_id(run_id, 0) for span, _ in t.spans()))
        names = {span.span_id.hex(): span.name for span, _ in trace.spans()}
        steps = {step_span_id(run_id, i): i for i in range(len(names))}
        first = next((f for f in found[trace.trace_id.hex()] if f.span_id.hex() in steps), None)
        prediction = None if first is None else (names[first.span_id.hex()], steps[first.span_id.hex()])
        predicted_runs += prediction is not None
        results.append((labelled[run_id], prediction))
    scores = whowhen_scores(results)
    print(f"Who&When: {len(runs)} runs from {path.name}")
    print(
        f"  evidence only (no judge), {seconds * 1000 / max(1, len(runs)):.1f} ms a run, 0 judge requests: "
        f"a step blamed in {predicted_runs} of {len(runs)} runs"
    )
    within = "   ".join(f"±{k} {v:.1%}" for k, v in scores.step_within.items())
    print(f"    agent-level {scores.agent_accuracy:.1%}   step-level {scores.step_accuracy:.1%}   {within}")
    print(f"  {WHOWHEN_PUBLISHED}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trail", type=Path, default=FIXTURES / "trail", help="folder with a TRAIL set")
    parser.add_argument("--whowhen", type=Path, default=FIXTURES / "whowhen", help="Who&When archive or run folder")
    args = parser.parse_args(argv)
    for path in (args.trail, args.whowhen):
        if not path.exists():
            parser.error(f"{path}: no such file or folder")
    trail(args.trail)
    whowhen(args.whowhen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
