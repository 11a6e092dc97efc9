"""The scaling benchmark holds the design to its bounds: with `scoring_workers: 2` the
collector process spends at most CORE_BOUND times the core config's CPU per span, and
at most SAME_RATE_BOUND times what the core spends at the same rate.

bench/ingest.py runs the collector core and the default config with two scoring workers
under closed-loop load, each reading the processes' own CPU clocks over the steady-state
window, then offers the core the rate the workers sustained. Where the collector
process's CPU per span goes up, the projection for more cores goes down by the same
factor: this is the figure that says whether the workers' cores can be used at all. The
bounds are ratios of figures from the same run, so a busy or slow machine moves both
sides; they leave room above the 2x the design aims for, which runs on this shared
machine reach or miss by turns (the figures are in docs/performance.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

# Measured here, this bench: 4.4-5.6x and 2.6-3.4x when workers sent back span field
# bytes for the collector to merge (three runs); 1.7-3.6x and 1.3-2.3x since they send
# the scored trace encoded, take slices of the received bytes and bucket the scores
# (four runs). Before workers prepared anything: 8.9-10.4x and 6.9-7.1x.
CORE_BOUND = 5.0
SAME_RATE_BOUND = 3.0


def test_with_two_workers_the_collector_spends_at_most_the_bound_per_span(tmp_path):
    figures_file = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, "bench/ingest.py", "--only-throughput", "--seconds", "12", "--workers", "2"]
        + ["--json", str(figures_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(figures_file.read_text())
    core, workers = figures["core"], figures["default"]["2"]
    # Nothing lost: every span the client had acknowledged reached the sink (with the
    # sessions' carrier spans besides, when scoring).
    assert core["received"] == core["sent"]
    assert workers["received"] >= workers["sent"] > 0
    assert len(workers["workers_cpu_us"]) == 2 and all(us > 0 for us in workers["workers_cpu_us"])
    assert workers["collector_cpu_us"] <= CORE_BOUND * core["collector_cpu_us"], result.stdout
    same_rate = figures["core_at_rate"]
    assert same_rate["offered_per_s"] == workers["sustained_per_s"]
    assert workers["collector_cpu_us"] <= SAME_RATE_BOUND * same_rate["collector_cpu_us"], result.stdout
    # The projection follows from the same figures: bound by the collector process.
    for row in workers["projected"]:
        assert row["spans_per_s"] <= 1e6 / workers["collector_cpu_us"] + 1e-6
    assert "projected, a core for the collector and one per other worker: 4 cores" in result.stdout
    # The second projection: the core's work at its saturated cost plus what workers add.
    modelled = figures["projected_at_ceiling"]
    assert modelled["added_us"] == pytest.approx(max(0.0, workers["collector_cpu_us"] - same_rate["collector_cpu_us"]))
    assert modelled["collector_cpu_us"] == pytest.approx(core["collector_cpu_us"] + modelled["added_us"])
