"""The cases of the agent-trace golden file (`tests/processors/golden/agent_traces.json`,
written by `tests/processors/golden/make_golden.py`; see there for what they are), and
the canonical JSON form the normalized traces are stored in."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.agent_spans import AgentRequests
from spanscore.processors.agent_trace import build_agent_trace
from tests.support.agent_fixtures import SPANS_DIR, load_spans
from tests.support.otlp_json import spans_by_trace

GOLDEN = Path(__file__).resolve().parents[1] / "processors" / "golden" / "agent_traces.json"
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
