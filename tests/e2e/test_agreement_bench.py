"""bench/agreement.py runs as documented: TRAIL's subset judged by the loopback stand-in
(no judge is configured here), what each trace showed the judge, the judge's cost, and
agree's report. The figures are the stand-in's; the test checks the machinery."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.processes import ROOT


def test_the_agreement_bench_runs_on_the_trail_subset_with_the_loopback_judge():
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SPANSCORE_"))}
    result = subprocess.run(
        [sys.executable, "bench/agreement.py", "--max-input-tokens", "4000"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(
        "5 traces from gaia-5.otlp.jsonl.gz; judge metrics plan_adherence, plan_quality, task_completion"
    )
    assert "a loopback stand-in answering 0.8 to everything" in out
    views = re.findall(r"^  ([0-9a-f]{32}) +(\d+) +([\d,]+) +([\d,]+) +([\d,]+) +([\d.]+)%", out, re.MULTILINE)
    assert len(views) == 5
    for _, _, _, uncut, capped, _ in views:
        assert int(capped.replace(",", "")) <= min(int(uncut.replace(",", "")), 4000)
    assert any(int(uncut.replace(",", "")) > 4000 for _, _, _, uncut, _, _ in views)  # the long trace was cut
    assert re.search(r"^judge cost: 20 requests, [\d,]+ input and [\d,]+ output tokens on 5 traces", out, re.MULTILINE)
    for metric in ("plan_adherence", "plan_quality", "task_completion"):
        assert f"{metric} · loopback-judge · revision " in out
