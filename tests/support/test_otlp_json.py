import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link

from tests.support.otlp_json import JsonLinesSpanExporter, read_requests, spans_by_trace


def test_exported_spans_are_otlp_json_lines_that_read_back(tmp_path):
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("parent", attributes={"n": 3, "tags": ["a", "b"]}) as parent:
        with tracer.start_as_current_span("child", links=[Link(parent.get_span_context())]):
            pass
    provider.shutdown()

    lines = path.read_text().splitlines()
    assert len(lines) == 2  # one request per export call
    child = json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    parent_id = f"{parent.get_span_context().span_id:016x}"
    assert child["parentSpanId"] == parent_id
    assert child["links"][0]["spanId"] == parent_id
    assert child["kind"] == 1

    [(trace_id, spans)] = spans_by_trace(read_requests(path)).items()
    assert trace_id == parent.get_span_context().trace_id.to_bytes(16, "big")
    assert [span.name for span, _ in spans] == ["child", "parent"]
    assert spans[0][0].parent_span_id == spans[1][0].span_id
