"""Writes `agent_traces.json`: what `build_agent_trace` made of known inputs, to hold it to.

    python tests/processors/golden/make_golden.py

Cases are every captured fixture as recorded, with its spans reversed, with a session
id, and all fixtures' spans as one trace (conventions mixed on one trace), plus bench
traces from `AgentRequests(seed=1)`, whose requests are the same on every run. Fixture
cases are stored in full so a change shows as a readable diff; bench traces are many
and alike, so they are stored as a digest of their outputs, with the first in full.

Rerun this only when a change to the normalized output is intended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from spanscore.processors.agent_trace import build_agent_trace  # noqa: E402
from tests.support.golden_agent_traces import (  # noqa: E402
    BENCH_REQUESTS,
    GOLDEN,
    bench_dumps,
    canonical,
    digest,
    fixture_cases,
)


def make() -> dict[str, Any]:
    fixtures = {
        name: canonical(build_agent_trace(trace_id, spans, session_id=session).model_dump())
        for name, trace_id, spans, session in fixture_cases()
    }
    bench = bench_dumps()
    return {
        "fixtures": fixtures,
        "bench": {"requests": BENCH_REQUESTS, "traces": len(bench), "sha256": digest(bench), "first": bench[0]},
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(make(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)}")
