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

import hashlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

from bench.agent_spans import AgentRequests  # noqa: E402
from spanscore.processors.agent_trace import build_agent_trace  # noqa: E402
from tests.support.agent_fixtures import SPANS_DIR, load_spans  # noqa: E402
from tests.support.otlp_json import spans_by_trace  # noqa: E402

GOLDEN = Path(__file__).with_name("agent_traces.json")
BENCH_REQUESTS = 5  # 64 traces each
SpanList = Sequence[tuple[Span, Resource]]


def canonical(value: Any) -> Any:
    """JSON-safe form of a `model_dump()`: sets sorted (their order is arbitrary), bytes as hex."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return {"$set": sorted(canonical(v) for v in value)}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return value


def fixture_cases() -> Iterator[tuple[str, bytes, SpanList, str | None]]:
    merged: list[tuple[Span, Resource]] = []
    merged_id = b""
    for path in sorted(SPANS_DIR.glob("*.jsonl")):
        trace_id, spans = load_spans(path.stem)
        merged_id = merged_id or trace_id
        merged += spans
        yield path.stem, trace_id, spans, None
        yield f"{path.stem}:reversed", trace_id, spans[::-1], None
        yield f"{path.stem}:session", trace_id, spans, "session-1"
    yield "all-fixtures-in-one-trace", merged_id, merged, None


def bench_traces(requests: int = BENCH_REQUESTS) -> Iterator[tuple[bytes, SpanList]]:
    generator = AgentRequests(seed=1)
    for _ in range(requests):
        request = ExportTraceServiceRequest.FromString(generator.make()[0])
        yield from spans_by_trace([request]).items()


def bench_dumps(build=build_agent_trace, requests: int = BENCH_REQUESTS) -> list[Any]:
    return [canonical(build(trace_id, spans).model_dump()) for trace_id, spans in bench_traces(requests)]


def digest(dumps: list[Any]) -> str:
    return hashlib.sha256(json.dumps(dumps, ensure_ascii=False).encode()).hexdigest()


def make() -> dict[str, Any]:
    fixtures = {name: canonical(build_agent_trace(trace_id, spans, session_id=session).model_dump())
                for name, trace_id, spans, session in fixture_cases()}
    bench = bench_dumps()
    return {
        "fixtures": fixtures,
        "bench": {"requests": BENCH_REQUESTS, "traces": len(bench), "sha256": digest(bench), "first": bench[0]},
    }


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(make(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)}")
