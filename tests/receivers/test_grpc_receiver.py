"""The gRPC receiver answers before it reads the message when it can: the method is
unary on the wire but served as stream-unary, so its checks run first."""

from __future__ import annotations

import threading

import grpc
import pytest

from tests.support.otlp_client import EXPORT, grpc_export
from tests.support.running import sink_config
from tests.support.spans import good_request


def test_a_full_pipeline_is_answered_before_the_message_is_sent(sink, start_collector):
    collector = start_collector(sink_config(sink, assembler="trace_wait: 1h, trace_timeout: 2h, max_buffered_spans: 1"))
    grpc_export(collector.grpc_port, good_request("fills it").SerializeToString())
    release = threading.Event()

    def never_sent():
        release.wait(10)
        yield good_request("held back").SerializeToString()

    try:
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
            with pytest.raises(grpc.RpcError) as error:
                export(never_sent(), timeout=5)
    finally:
        release.set()
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    assert collector.pipeline.counts.received_spans == 1


def test_a_call_without_a_message_is_invalid_argument(sink, start_collector):
    collector = start_collector(sink_config(sink))
    with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
        export = channel.stream_unary(EXPORT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as error:
            export(iter(()), timeout=5)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == "no ExportTraceServiceRequest was sent"
