"""Does a judge agree with people on real agent traces? TRAIL's traces, judged, then compared.

    python bench/agreement.py [--trail DIR] [--max-input-tokens N] [--trials N] [--metrics a,b]

DIR holds a TRAIL set: `*.otlp.jsonl.gz` (one trace per line, OTLP/JSON) and
`*.annotations.jsonl` (people's 1–5 scores per trace); the default is the five-trace
subset in tests/fixtures/trail, and the full set of 30 GAIA traces is read the same way.

The judge is whatever `OPENAI_BASE_URL` / `OPENAI_API_KEY` name, with the model
`SPANSCORE_JUDGE_MODEL` (default gpt-4.1-mini). With neither variable set, a loopback
stand-in speaking the OpenAI protocol answers every question with 0.8: the run then
checks the machinery, and its agreement figures mean nothing (the output says so).

Prints, per trace, how much of it the judge saw (the data block's estimated tokens with
every field cut to `max_field_chars` only, and after the `max_input_tokens` cap, with the
share of the text and steps kept); the judge's cost (requests and tokens, from
`eval.judge.*` on the scored spans) and the wall time of `spanscore score`; then
`spanscore agree`'s report against TRAIL's scores through the built-in mapping.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from spanscore.core.attributes import any_value_to_python  # noqa: E402
from spanscore.core.score_encoding import usage_keys  # noqa: E402
from spanscore.offline.otlp_files import read_requests  # noqa: E402
from spanscore.offline.trail_labels import BUILT_IN_MAPPING, read_mapping  # noqa: E402
from spanscore.pipeline.assembler import Assembler  # noqa: E402
from spanscore.pipeline.settings import PipelineSettings  # noqa: E402
from spanscore.processors.agent_trace import agent_trace_of  # noqa: E402
from spanscore.processors.judge_metrics.planner import DEFAULT_MAX_INPUT_TOKENS, judge_view  # noqa: E402
from spanscore.processors.judge_metrics.prompts import DEFAULT_MAX_FIELD_CHARS  # noqa: E402
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES  # noqa: E402
from spanscore.processors.judge_metrics.trace_view import DoesNotFit  # noqa: E402
from tests.support.judge_answers import schema_judge  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402

DEFAULT_TRAIL = ROOT / "tests" / "fixtures" / "trail"
LOOPBACK_NOTE = (
    "judge: a loopback stand-in answering 0.8 to everything (no OPENAI_BASE_URL or OPENAI_API_KEY set): "
    "the agreement figures below check the machinery and say nothing about any model"
)


def one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        sys.exit(f"{folder}: expected one {pattern}, found {len(found)}")
    return found[0]


def traces_of(path: Path):
    assembler = Assembler(PipelineSettings(forwarded_trace_memory=0))
    problems: list[str] = []
    for _, request in read_requests(path, problems):
        assembler.add(request, 0.0)
    if problems:
        sys.exit("\n".join(problems))
    return assembler.pop_all()


def print_views(traces, metrics: list[str], max_input_tokens: int) -> None:
    print(
        f"what the judge saw per trace: the trace's text, the data block's estimated tokens with fields cut to "
        f"{DEFAULT_MAX_FIELD_CHARS:,} characters, and under the {max_input_tokens:,}-token cap"
    )
    print(f"  {'trace':<32} {'spans':>5} {'text chars':>10} {'tokens':>8} {'capped':>7} {'text seen':>9} steps seen")
    for trace in traces:
        agent = agent_trace_of(trace)
        try:
            _, coverage = judge_view(agent, metrics=metrics, max_input_tokens=max_input_tokens)
        except DoesNotFit:
            print(f"  {trace.trace_id_hex:<32} does not fit {max_input_tokens:,} tokens at all")
            continue
        print(
            f"  {trace.trace_id_hex:<32} {trace.span_count:>5} {coverage.chars_total:>10,} {coverage.tokens_uncut:>8,} "
            f"{coverage.tokens:>7,} {coverage.share:>9.1%} {coverage.steps_shown:>4}/{coverage.steps_total}"
        )


def config_text(base_url: str, api_key: str, model: str, metrics: list[str], args) -> str:
    enabled = ", ".join(f"{m}: {{enabled: {str(m in metrics).lower()}}}" for m in METRIC_NAMES)
    return (
        "receivers: {otlp: {}}\n"
        "processors:\n"
        f"  judge_metrics: {{judge: {{model: {json.dumps(model)}, base_url: {json.dumps(base_url)}, "
        f"api_key: {json.dumps(api_key)}, cache: {{enabled: false}}}}, trials: {args.trials}, "
        f"max_input_tokens: {args.max_input_tokens}, metrics: {{{enabled}}}}}\n"
        "exporters: {debug: {}}\n"
        "service: {pipelines: {traces: {receivers: [otlp], processors: [assembler, judge_metrics], "
        "exporters: [debug]}}}\n"
    )


def score(traces: Path, folder: Path, config: str) -> tuple[Path, float]:
    (folder / "config.yaml").write_text(config)
    out = folder / "scored.jsonl"
    started = time.perf_counter()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spanscore",
            "score",
            str(traces),
            "-o",
            str(out),
            "--config",
            str(folder / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if result.returncode != 0:
        sys.exit(f"spanscore score failed:\n{result.stderr}")
    return out, time.perf_counter() - started


def print_cost(scored: Path, seconds: float) -> None:
    judge = usage_keys("judge")
    per_trace = []
    for _, request in read_requests(scored, []):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    usage = {
                        kv.key: any_value_to_python(kv.value)
                        for kv in span.attributes
                        if kv.key.startswith(judge.prefix)
                    }
                    if judge.calls in usage:
                        per_trace.append(usage)
    if not per_trace:
        sys.exit("no span carries the judge's usage: were the traces judged?")
    calls = [u[judge.calls] for u in per_trace]
    inputs = [u[judge.input_tokens] for u in per_trace]
    outputs = [u[judge.output_tokens] for u in per_trace]
    shares = [u[judge.input_share] for u in per_trace if judge.input_share in u]
    n = len(per_trace)
    print(
        f"judge cost: {sum(calls):,} requests, {sum(inputs):,} input and {sum(outputs):,} output tokens on {n} traces "
        f"(per trace: {sum(calls) / n:.1f} requests, {sum(inputs) / n:,.0f} input tokens, largest {max(inputs):,}); "
        f"spanscore score took {seconds:.1f} s"
    )
    if shares:
        print(
            f"share of each trace's text the judge saw: mean {sum(shares) / len(shares):.1%}, least {min(shares):.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trail", type=Path, default=DEFAULT_TRAIL, help="a folder with a TRAIL set")
    parser.add_argument("--max-input-tokens", type=int, default=DEFAULT_MAX_INPUT_TOKENS)
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument(
        "--metrics", default=None, help="judge metrics to run (default: the ones TRAIL's mapping names)"
    )
    args = parser.parse_args()
    traces_path, annotations = one(args.trail, "*.otlp.jsonl.gz"), one(args.trail, "*.annotations.jsonl")
    metrics = args.metrics.split(",") if args.metrics else sorted(set(read_mapping(BUILT_IN_MAPPING)[1].values()))
    traces = traces_of(traces_path)
    print(f"{len(traces)} traces from {traces_path.name}; judge metrics {', '.join(metrics)}; trials {args.trials}")
    print_views(traces, metrics, args.max_input_tokens)
    base_url, api_key = os.environ.get("OPENAI_BASE_URL", ""), os.environ.get("OPENAI_API_KEY", "")
    model = os.environ.get("SPANSCORE_JUDGE_MODEL", "gpt-4.1-mini")
    with tempfile.TemporaryDirectory() as workdir:
        folder = Path(workdir)
        if base_url or api_key:
            print(f"judge: {model} at {base_url or 'https://api.openai.com/v1'}")
            scored, seconds = score(traces_path, folder, config_text(base_url, api_key, model, metrics, args))
        else:
            print(LOOPBACK_NOTE)
            with OpenAIServer(handler=schema_judge(score=0.8, fixed_usage=False)) as server:
                config = config_text(server.base_url, "loopback", "loopback-judge", metrics, args)
                scored, seconds = score(traces_path, folder, config)
        print_cost(scored, seconds)
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "spanscore", "agree", str(scored), "--trail", str(annotations)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        print(f"\nspanscore agree ({time.perf_counter() - started:.1f} s):")
        print(result.stdout, end="")
        if result.returncode != 0:
            sys.exit(f"spanscore agree exited {result.returncode}:\n{result.stderr}")


if __name__ == "__main__":
    main()
