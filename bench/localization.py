"""Where did the agent go wrong? failure_localization against people's labels: TRAIL and Who&When.

    python bench/localization.py [--trail DIR] [--whowhen PATH] [--max-input-tokens N] [--no-judge]

DIR holds a TRAIL set: `*.otlp.jsonl.gz` (one trace per line, OTLP/JSON) and
`*.annotations.jsonl` (people's errors per trace: span id, category, impact); PATH is
Who&When's archive (`.tar.gz`) or a folder of its run files. The defaults are the
subsets in tests/fixtures (5 TRAIL traces, 3 Who&When runs); the full sets are read the
same way.

Every trace is localized with `when: always` (the sets are labelled whether or not a
metric failed a run), by three methods: evidence only (no judge); and with a judge,
`windows` and `bisection` (a run that fits `max_input_tokens` is read in one call by
both). The judge is whatever OPENAI_BASE_URL / OPENAI_API_KEY name (model
SPANSCORE_JUDGE_MODEL, default gpt-4.1-mini); with neither set, a loopback stand-in
speaking the OpenAI protocol blames every step it is shown that says "error": its
figures check the machinery (windows, bisection, the cap, span ids, cost) and say
nothing about any model. Then, as each benchmark's own scorer scores:
- TRAIL: location accuracy, joint location+category accuracy (means over traces), the
  category F1 weighted over categories; here also the share of the labelled errors
  located per group and in all, and the precision of the blamed spans (the share that
  people blamed too);
- Who&When: the first blamed step of each run as the prediction; agent-level and
  step-level accuracy, and step-level within ±1, ±2, ±3.
And the cost per trace: judge requests and tokens, and with the stand-in the largest
request's estimated tokens against the cap. Published figures are printed for scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.whowhen_otlp import RunError, convert_run, read_runs, step_span_id  # noqa: E402
from spanscore.core.otlp_json import decode_request  # noqa: E402
from spanscore.core.span_finding import SpanFinding  # noqa: E402
from spanscore.core.trace import Trace  # noqa: E402
from spanscore.core.usage import EvaluatorUsage  # noqa: E402
from spanscore.offline.localization_scoring import category_key, trail_scores, whowhen_scores  # noqa: E402
from spanscore.offline.otlp_files import read_requests  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402
from spanscore.processors.failure_localization import FailureLocalization, FailureLocalizationConfig  # noqa: E402
from spanscore.processors.judge_metrics.prompts import prompt_tokens  # noqa: E402
from spanscore.processors.localization.taxonomy import taxonomy  # noqa: E402
from tests.support.judge_answers import schema_of  # noqa: E402
from tests.support.localization_judge import localization_judge  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
DEFAULT_CAP = 8_000  # below the default 32,000, so TRAIL's long runs take more than one call
STAND_IN_NOTE = (
    "judge: a loopback stand-in (no OPENAI_BASE_URL or OPENAI_API_KEY set) blaming each step it is shown "
    'that says "error": its figures check the machinery and say nothing about any model'
)
# Published, for scale (not comparable as is: other models, other prompts, all of TRAIL's GAIA split).
TRAIL_PUBLISHED = "TRAIL GAIA joint accuracy, published: Gemini 2.5 Pro 0.18, o3 0.09, GPT-4.1 0.03"
WHOWHEN_PUBLISHED = (
    "Who&When, published (GPT-4o, all at once): agent-level 54.3% / 55.2%, step-level 12.5% / 5.3% "
    "(Algorithm-Generated / Hand-Crafted); step by step 25.5% / 7.0%; random step-level 19.1% / 4.2%"
)


@dataclass
class Judge:
    model: str
    base_url: str
    api_key: str
    server: OpenAIServer | None = None  # the stand-in, whose requests are recorded


@dataclass
class Localized:
    findings: dict[str, list[SpanFinding]] = field(default_factory=dict)  # by trace id (hex)
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    largest_request: int | None = None  # estimated tokens, when the requests were recorded


def localize(traces: list[Trace], judge: Judge | None, method: str, cap: int) -> Localized:
    settings: dict = {"when": "always", "max_errors": 1000, "session_turns": False, "max_input_tokens": cap}
    if judge is not None:
        settings["judge"] = {"model": judge.model, "base_url": judge.base_url or None, "api_key": judge.api_key}
        settings["long_runs"] = method
    processor = FailureLocalization("failure_localization", FailureLocalizationConfig(**settings))
    localized = Localized()
    before = len(judge.server.requests_to("/chat/completions")) if judge and judge.server else 0

    async def run() -> None:
        await processor.start()
        try:
            for trace in traces:
                outputs = await processor.process_trace(trace, None)
                localized.findings[trace.trace_id.hex()] = [o for o in outputs if isinstance(o, SpanFinding)]
                for usage in (o for o in outputs if isinstance(o, EvaluatorUsage)):
                    localized.requests += usage.calls
                    localized.input_tokens += usage.input_tokens
                    localized.output_tokens += usage.output_tokens
        finally:
            await processor.shutdown(0.0)

    started = time.perf_counter()
    asyncio.run(run())
    localized.seconds = time.perf_counter() - started
    if judge is not None and judge.server is not None:
        sent = judge.server.requests_to("/chat/completions")[before:]
        sizes = [prompt_tokens(r.messages(), schema_of(r)[1]) for r in sent]
        localized.largest_request = max(sizes, default=0)
    return localized


def assemble(requests) -> list[Trace]:
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    for request in requests:
        assembler.add(request, 0.0)
    return sorted(assembler.pop_all(), key=lambda trace: trace.trace_id)


def cost_line(localized: Localized, count: int, cap: int) -> str:
    per = max(1, count)
    line = (
        f"{localized.seconds * 1000 / per:.1f} ms a trace, {localized.requests / per:.1f} judge requests and "
        f"{localized.input_tokens / per:,.0f} input / {localized.output_tokens / per:,.0f} output tokens a trace"
    )
    if localized.largest_request is not None:
        line += f"; largest request {localized.largest_request:,} estimated tokens (cap {cap:,})"
    return line


def trail(directory: Path, methods: list[tuple[str, Judge | None]], cap: int) -> None:
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
    gold_errors = sum(len(errors) for errors in labels.values())
    spans = sum(len(list(trace.spans())) for trace in traces)
    print(f"TRAIL: {len(traces)} traces ({spans} spans) from {spans_file.name}, {gold_errors} labelled errors")
    for method, judge in methods:
        localized = localize(traces, judge, method, cap)
        pairs = [
            (
                labels.get(t.trace_id.hex(), []),
                [(f.span_id.hex(), f.label) for f in localized.findings[t.trace_id.hex()]],
            )
            for t in traces
        ]
        scores = trail_scores(pairs)
        print(f"  {method}: {cost_line(localized, len(traces), cap)}")
        print(
            f"    location accuracy {scores.location_accuracy:.3f}   joint accuracy {scores.joint_accuracy:.3f}   "
            f"weighted category F1 {scores.weighted_f1:.3f}"
        )
        located, labelled = Counter(), Counter()
        blamed = also_by_people = 0
        for gold, predicted in pairs:
            predicted_spans = {span for span, _ in predicted}
            blamed += len(predicted_spans)
            also_by_people += len(predicted_spans & {span for span, _ in gold})
            for span, label in gold:
                key = category_key(label)
                group = "?" if key.startswith("?") else taxonomy()[key].group
                labelled[group] += 1
                located[group] += span in predicted_spans
        for group in taxonomy().groups:
            if labelled[group]:
                print(
                    f"    {group.replace('_', ' ')} errors located: {located[group]} of {labelled[group]} "
                    f"({located[group] / labelled[group]:.1%})"
                )
        total = sum(located.values())
        print(f"    all errors located: {total} of {gold_errors} ({total / max(1, gold_errors):.1%})")
        print(
            f"    precision: {also_by_people} of {blamed} blamed spans were blamed by people too "
            f"({also_by_people / max(1, blamed):.1%})"
        )
        by_category = Counter(f.label for findings in localized.findings.values() for f in findings)
        print("    blamed by category: " + (", ".join(f"{c} {n}" for c, n in by_category.most_common()) or "none"))
    print(f"  {TRAIL_PUBLISHED}")


def whowhen_runs(path: Path):
    if path.is_dir():
        for file in sorted(path.glob("*.json")):
            yield file.stem, json.loads(file.read_text(encoding="utf-8"))
    else:
        for _, run_id, run in read_runs(path):
            yield run_id, run


def whowhen(path: Path, methods: list[tuple[str, Judge | None]], cap: int) -> None:
    runs = list(whowhen_runs(path))
    requests, labelled = [], {}
    for run_id, run in runs:
        try:
            requests.append(decode_request(json.dumps(convert_run(run, run_id))))
        except RunError as exc:
            raise SystemExit(f"{path}: {exc}") from None
        labelled[run_id] = (str(run.get("mistake_agent", "")), int(run.get("mistake_step", -1)))
    traces = assemble(requests)
    trace_of = {}
    for trace in traces:
        span_ids = {span.span_id.hex() for span, _ in trace.spans()}
        for run_id, _ in runs:
            if step_span_id(run_id, 0) in span_ids:
                trace_of[run_id] = trace
    print(f"Who&When: {len(runs)} runs from {path.name}")
    for method, judge in methods:
        localized = localize(traces, judge, method, cap)
        results = []
        predicted_runs = 0
        for run_id, _ in runs:
            trace = trace_of[run_id]
            names = {span.span_id.hex(): span.name for span, _ in trace.spans()}
            steps = {step_span_id(run_id, i): i for i in range(len(names))}
            first = next((f for f in localized.findings[trace.trace_id.hex()] if f.span_id.hex() in steps), None)
            prediction = None if first is None else (names[first.span_id.hex()], steps[first.span_id.hex()])
            predicted_runs += prediction is not None
            results.append((labelled[run_id], prediction))
        scores = whowhen_scores(results)
        print(
            f"  {method}: {cost_line(localized, len(runs), cap)}; a step blamed in {predicted_runs} of {len(runs)} runs"
        )
        within = "   ".join(f"±{k} {v:.1%}" for k, v in scores.step_within.items())
        print(f"    agent-level {scores.agent_accuracy:.1%}   step-level {scores.step_accuracy:.1%}   {within}")
    print(f"  {WHOWHEN_PUBLISHED}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trail", type=Path, default=FIXTURES / "trail", help="folder with a TRAIL set")
    parser.add_argument("--whowhen", type=Path, default=FIXTURES / "whowhen", help="Who&When archive or run folder")
    parser.add_argument("--max-input-tokens", type=int, default=DEFAULT_CAP, help="the judge's cap per call")
    parser.add_argument("--no-judge", action="store_true", help="evidence only")
    args = parser.parse_args(argv)
    for path in (args.trail, args.whowhen):
        if not path.exists():
            parser.error(f"{path}: no such file or folder")
    methods: list[tuple[str, Judge | None]] = [("evidence only", None)]
    base_url, api_key = os.environ.get("OPENAI_BASE_URL", ""), os.environ.get("OPENAI_API_KEY", "")
    server = None
    if not args.no_judge:
        if base_url or api_key:
            judge = Judge(os.environ.get("SPANSCORE_JUDGE_MODEL", "gpt-4.1-mini"), base_url, api_key)
            print(f"judge: {judge.model} at {base_url or 'https://api.openai.com/v1'}")
        else:
            server = OpenAIServer(handler=localization_judge(marker="error", category="tool_output_misinterpretation"))
            server.start()
            judge = Judge("loopback-judge", server.base_url, "loopback", server)
            print(STAND_IN_NOTE)
        methods += [("windows", judge), ("bisection", judge)]
    try:
        trail(args.trail, methods, args.max_input_tokens)
        whowhen(args.whowhen, methods, args.max_input_tokens)
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
