"""Spans sent by real OTLP clients leave spanscore unchanged, field for field."""

from __future__ import annotations

import gzip
import urllib.request

import grpc
import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonHttpExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from spanscore.core.otlp_json import encode_request
from tests.support.running import sink_config, wait_until
from tests.support.spans import assert_forwarded_faithfully, every_field_request

SDK_CLIENTS = {
    "grpc": lambda c: GrpcExporter(endpoint=f"127.0.0.1:{c.grpc_port}", insecure=True),
    "http-protobuf": lambda c: HttpExporter(endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces"),
    "http-json": lambda c: JsonHttpExporter(endpoint=f"http://127.0.0.1:{c.http_port}/v1/traces"),
}


def run_sdk_agent(exporter) -> list:
    """Emit a small agent-shaped trace through `exporter`; return the spans the SDK made."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "weather-agent", "deployment.environment": "test"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("agent.tests", "0.1", schema_url="https://opentelemetry.io/schemas/1.26.0")
    with tracer.start_as_current_span(
        "invoke_agent weather",
        kind=SpanKind.SERVER,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "session.id": "s-1",
            "tags": ["a", "b"],
            "retries": 2,
            "ratio": 0.5,
            "ok": True,
        },
    ) as root:
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as llm:
            llm.add_event("gen_ai.choice", {"index": 0})
        with tracer.start_as_current_span(
            "execute_tool get_weather", links=[Link(root.get_span_context(), {"why": "x"})]
        ) as tool:
            tool.set_status(Status(StatusCode.ERROR, "city not found"))
            tool.record_exception(ValueError("no such city"))
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.mark.parametrize("client", list(SDK_CLIENTS))
@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_sdk_client_spans_are_forwarded_field_for_field(client, exporter, sink, start_collector):
    collector = start_collector(sink_config(sink, exporter=exporter))
    finished = run_sdk_agent(SDK_CLIENTS[client](collector))
    assert wait_until(lambda: len(sink.spans()) >= 3)
    assert_forwarded_faithfully([encode_spans(finished)], sink.requests)


def test_every_field_and_value_type_survives_grpc(sink, start_collector):
    collector = start_collector(sink_config(sink))
    sent = every_field_request()
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )
        response = export(sent.SerializeToString(), timeout=5)
    assert not response.partial_success.rejected_spans
    assert wait_until(lambda: len(sink.spans()) == 3)
    assert_forwarded_faithfully([sent], sink.requests)


@pytest.mark.parametrize("encoding", ["protobuf", "json", "json-gzip"])
def test_every_field_and_value_type_survives_http(encoding, sink, start_collector):
    collector = start_collector(sink_config(sink, exporter="otlphttp"))
    sent = every_field_request()
    if encoding == "protobuf":
        body, content_type = sent.SerializeToString(), "application/x-protobuf"
    else:
        body, content_type = encode_request(sent).encode(), "application/json"
    headers = {"Content-Type": content_type}
    if encoding.endswith("gzip"):
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    request = urllib.request.Request(f"http://127.0.0.1:{collector.http_port}/v1/traces", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith(content_type)
    assert wait_until(lambda: len(sink.spans()) == 3)
    assert_forwarded_faithfully([sent], sink.requests)


def test_a_second_spanscore_as_the_backend_receives_everything_unchanged(sink, start_collector):
    """Chained collectors: the first forwards over OTLP/HTTP into the second's receiver."""
    downstream = start_collector(sink_config(sink, assembler="trace_wait: 20ms"))
    upstream = start_collector(
        sink_config(sink, assembler="trace_wait: 20ms").replace(
            f"otlp: {{endpoint: 127.0.0.1:{sink.grpc_port}", f"otlp: {{endpoint: 127.0.0.1:{downstream.grpc_port}"
        )
    )
    finished = run_sdk_agent(SDK_CLIENTS["http-json"](upstream))
    assert wait_until(lambda: len(sink.spans()) >= 3)
    assert_forwarded_faithfully([encode_spans(finished)], sink.requests)
