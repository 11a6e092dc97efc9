"""bench/localization.py runs as documented on the subsets in tests/fixtures: TRAIL's and
Who&When's measures of the evidence-only localization, and of the windows and bisection
methods with the loopback stand-in judge (plumbing only), beside the published figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.processes import ROOT


def run_bench(*args: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SPANSCORE_"))}
    return subprocess.run(
        [sys.executable, "bench/localization.py", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )


def test_the_localization_bench_scores_each_method_on_both_subsets():
    result = run_bench("--max-input-tokens", "5400")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("judge: a loopback stand-in (no OPENAI_BASE_URL or OPENAI_API_KEY set)")
    trail, whowhen = out.split("Who&When: 3 runs from whowhen\n")
    assert "TRAIL: 5 traces (76 spans) from gaia-5.otlp.jsonl.gz, 20 labelled errors\n" in trail
    evidence, windows, bisection = re.split(r"^  (?:windows|bisection): ", trail, flags=re.MULTILINE)
    # The subset's only failed tool calls are three searches that found nothing, which
    # people did not label: the evidence blames them, and none of the labelled errors.
    assert "  evidence only: " in evidence and "0.0 judge requests" in evidence
    assert "    all errors located: 0 of 20 (0.0%)\n" in evidence
    assert "    precision: 0 of 3 blamed spans were blamed by people too (0.0%)\n" in evidence
    assert "    blamed by category: resource_not_found 3\n" in evidence
    assert re.search(r"location accuracy 0\.000 +joint accuracy 0\.000 +weighted category F1 0\.000", evidence)
    for method in (windows, bisection):
        requests, largest = re.search(
            r"([\d.]+) judge requests and [\d,]+ input / [\d,]+ output tokens a trace; "
            r"largest request ([\d,]+) estimated tokens \(cap 5,400\)",
            method,
        ).groups()
        assert float(requests) > 1.0  # a long run of the subset took more than one call
        assert int(largest.replace(",", "")) <= 5_400
        assert "tool_output_misinterpretation" in method  # the stand-in's blames arrived on spans
    assert whowhen.count("a step blamed in") == 3  # evidence only, windows, bisection
    assert "evidence only: " in whowhen and "a step blamed in 0 of 3 runs" in whowhen
    assert "published: Gemini 2.5 Pro 0.18" in trail and "agent-level 54.3% / 55.2%" in whowhen


def test_a_missing_set_is_a_usage_error():
    result = run_bench("--trail", "no/such/dir")
    assert result.returncode == 2
    assert result.stderr.strip().endswith("no/such/dir: no such file or folder")
