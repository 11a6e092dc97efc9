"""OTLP/JSON lines: one `ExportTraceServiceRequest` per line, the spanscore file format.

The OTLP/JSON encoding differs from protobuf's canonical JSON mapping in two ways that
matter here: trace and span ids are lowercase hex (not base64), and enums are integers.
Field names are lowerCamelCase and 64-bit integers are decimal strings, which is what
`json_format.MessageToDict` already produces.

`JsonLinesSpanExporter` is an SDK `SpanExporter` writing that format, used to capture
fixtures from real instrumentation libraries; `read_requests` loads such a file back into
protobuf requests for tests.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _ids_to(spans_holder: dict[str, Any], convert) -> None:
    for resource_spans in spans_holder.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in _ID_KEYS:
                    if span.get(key):
                        span[key] = convert(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = convert(link[key])


def request_to_json(request: ExportTraceServiceRequest) -> str:
    """One OTLP/JSON line (no trailing newline)."""
    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    _ids_to(data, lambda b64: base64.b64decode(b64).hex())
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def request_from_json(line: str) -> ExportTraceServiceRequest:
    data = json.loads(line)
    _ids_to(data, lambda hex_id: base64.b64encode(bytes.fromhex(hex_id)).decode())
    return json_format.ParseDict(data, ExportTraceServiceRequest(), ignore_unknown_fields=True)


def read_requests(path: str | Path) -> list[ExportTraceServiceRequest]:
    with open(path, encoding="utf-8") as f:
        return [request_from_json(line) for line in f if line.strip()]


def spans_by_trace(
    requests: Sequence[ExportTraceServiceRequest],
) -> dict[bytes, list[tuple[Span, Resource]]]:
    """Every span grouped by trace id, each with its resource, in file order."""
    traces: dict[bytes, list[tuple[Span, Resource]]] = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    traces.setdefault(span.trace_id, []).append((span, resource_spans.resource))
    return traces


try:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
except ImportError:  # readers need only the protobuf classes
    SpanExporter = object  # type: ignore[assignment,misc]


class JsonLinesSpanExporter(SpanExporter):  # type: ignore[misc,valid-type]
    """Appends each exported batch to `path` as one OTLP/JSON line. Thread-safe."""

    def __init__(self, path: str | Path):
        self._path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans):  # type: ignore[no-untyped-def]
        line = request_to_json(encode_spans(spans))
        with self._lock, open(self._path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
