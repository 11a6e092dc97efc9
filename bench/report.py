"""`spanscore report` over a large scored file: seconds and peak memory.

    python bench/report.py [--spans 100000]

Writes a scored OTLP/JSON lines file of one-trace attempts (8 agent spans each: a root
with `eval.case.id` and a `success` result, 6 tool calls, an LLM call; 50 cases,
about 60% successes) and times reading it, summarizing it and rendering the HTML page as `spanscore report` does,
in this process; peak RSS is the process's high-water mark (ru_maxrss).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.core.otlp_json import encode_request  # noqa: E402
from spanscore.core.score_encoding import CASE_ID, result_keys  # noqa: E402
from spanscore.offline.suite_attempts import read_scored  # noqa: E402
from spanscore.offline.suite_html import render  # noqa: E402
from spanscore.offline.suite_report import summarize  # noqa: E402
from tests.support.spans import new_span_id, new_trace_id, request_of, span  # noqa: E402

SPANS_PER_ATTEMPT = 8
ATTEMPTS_PER_LINE = 64


def attempt(index: int) -> list:
    trace_id, root = new_trace_id(), new_span_id()
    spans = [
        span(
            trace_id,
            "invoke_agent weather",
            span_id=root,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                CASE_ID: f"case-{index % 50}",
                result_keys("success").score: 1.0 if index % 5 < 3 else 0.0,
                "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "weather?"}]}]',
            },
        )
    ]
    spans.append(span(trace_id, "chat", parent=root, attributes={"gen_ai.operation.name": "chat"}))
    for call in range(SPANS_PER_ATTEMPT - 2):
        spans.append(
            span(
                trace_id,
                "execute_tool",
                parent=root,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": f"tool_{(index + call) % 4}",
                    "gen_ai.tool.call.arguments": '{"city": "Oslo"}',
                    "gen_ai.tool.call.result": "Snowing",
                },
            )
        )
    return spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    args = parser.parse_args()
    attempts = args.spans // SPANS_PER_ATTEMPT
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scored.jsonl"
        with path.open("w") as f:
            for start in range(0, attempts, ATTEMPTS_PER_LINE):
                spans = [s for i in range(start, min(start + ATTEMPTS_PER_LINE, attempts)) for s in attempt(i)]
                f.write(encode_request(request_of(spans)) + "\n")
        size_mib = path.stat().st_size / 2**20
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.perf_counter()
        run = read_scored([path])
        read_s = time.perf_counter() - started
        summary = summarize(run, (1, 3, 5))
        summarized_s = time.perf_counter() - started
        page = render(summary, run, [str(path)])
        total_s = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{attempts * SPANS_PER_ATTEMPT:,} spans ({size_mib:.1f} MiB, {attempts:,} attempts, "
        f"{len(summary['cases'])} cases): read {read_s:.1f}s, summarized {summarized_s - read_s:.1f}s, "
        f"HTML {total_s - summarized_s:.1f}s ({len(page) / 2**20:.1f} MiB), "
        f"total {total_s:.1f}s ({attempts * SPANS_PER_ATTEMPT / total_s:,.0f} spans/s); "
        f"peak RSS {peak:.0f} MiB (before reading {rss_before:.0f} MiB); TSR {summary['tsr']['estimate']:.3f}; "
        f"pid {os.getpid()}"
    )


if __name__ == "__main__":
    main()
