"""When the span bound is reached clients are told to retry later; nothing is dropped."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.support.otlp_client import grpc_export, post
from tests.support.running import sink_config, wait_until
from tests.support.spans import good_request


def test_full_pipeline_answers_503_and_unavailable_with_retry_info(sink, start_collector):
    collector = start_collector(sink_config(sink, assembler="trace_wait: 1h, trace_timeout: 2h, max_buffered_spans: 2"))
    for i in range(2):
        status, _, _ = post(
            collector.http_port, good_request(f"fits {i}").SerializeToString(), "application/x-protobuf"
        )
        assert status == 200
    status, headers, payload = post(
        collector.http_port, good_request("too many").SerializeToString(), "application/x-protobuf"
    )
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert status_pb2.Status.FromString(payload).code == 14  # UNAVAILABLE
    with pytest.raises(grpc.RpcError) as error:
        grpc_export(collector.grpc_port, good_request("too many").SerializeToString())
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(error.value.trailing_metadata())
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"]).details
    info = error_details_pb2.RetryInfo()
    assert details[0].Unpack(info) and info.retry_delay.seconds >= 1
    assert collector.pipeline.counts.held_spans == 2


def test_sdk_exporter_retries_through_backpressure_and_every_span_arrives(sink, start_collector):
    collector = start_collector(sink_config(sink, assembler="trace_wait: 50ms, max_buffered_spans: 3"))
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True))
    )
    tracer = provider.get_tracer("burst")
    names = [f"span {i}" for i in range(8)]
    for name in names:
        with tracer.start_as_current_span(name):
            pass
    provider.shutdown()
    assert wait_until(lambda: sorted(s.name for s in sink.spans()) == sorted(names), timeout_s=30)
    assert collector.pipeline.counts.refused_requests >= 1  # the bound was really hit
    assert collector.pipeline.counts.held_spans == 0
