"""bench/localization.py runs as documented on the subsets in tests/fixtures: TRAIL's and
Who&When's measures of the evidence-only localization, beside the published figures."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.processes import ROOT


def test_the_localization_bench_scores_the_evidence_on_both_subsets():
    result = subprocess.run(
        [sys.executable, "bench/localization.py"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("TRAIL: 5 traces (76 spans) from gaia-5.otlp.jsonl.gz, 20 labelled errors\n")
    # The subset's only failed tool calls are three searches that found nothing, which
    # people did not label: the evidence blames them, and none of the labelled errors.
    assert "    all errors located: 0 of 20 (0.0%)\n" in out
    assert "    precision: 0 of 3 blamed spans were blamed by people too (0.0%)\n" in out
    assert "    blamed by category: resource_not_found 3\n" in out
    assert re.search(r"location accuracy 0\.000 +joint accuracy 0\.000 +weighted category F1 0\.000", out)
    assert "Who&When: 3 runs from whowhen\n" in out
    assert "a step blamed in 0 of 3 runs" in out  # no status, tool or HTTP call in those runs to go by
    assert "published: Gemini 2.5 Pro 0.18" in out and "agent-level 54.3% / 55.2%" in out


def test_a_missing_set_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, "bench/localization.py", "--trail", "no/such/dir"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().endswith("no/such/dir: no such file or folder")
