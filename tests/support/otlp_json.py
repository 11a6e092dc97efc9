"""OTLP/JSON lines: one `ExportTraceServiceRequest` per line, the spanscore file format.

The encoding itself is the collector's (`collector.otlp_json`), so fixtures are written
and read exactly as the file exporter writes and the HTTP receiver reads them.
`JsonLinesSpanExporter` is an SDK `SpanExporter` writing that format, used to capture
fixtures from real instrumentation libraries; `read_requests` loads such a file back
into protobuf requests for tests.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.otlp_json import decode_request, encode_request

try:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
except ImportError:  # readers need only the protobuf classes
    SpanExporter = object  # type: ignore[assignment,misc]


def read_requests(path: str | Path) -> list[ExportTraceServiceRequest]:
    with open(path, encoding="utf-8") as f:
        return [decode_request(line) for line in f if line.strip()]


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


class JsonLinesSpanExporter(SpanExporter):  # type: ignore[misc,valid-type]
    """Appends each exported batch to `path` as one OTLP/JSON line. Thread-safe."""

    def __init__(self, path: str | Path):
        self._path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans):  # type: ignore[no-untyped-def]
        line = encode_request(encode_spans(spans))
        with self._lock, open(self._path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def written_spans(output: Path) -> list:
    """The spans a file exporter wrote to `output`, over every run (it appends); none when
    it wrote nothing yet."""
    if not output.exists():
        return []
    return [
        span for r in read_requests(output) for rs in r.resource_spans for ss in rs.scope_spans for span in ss.spans
    ]
