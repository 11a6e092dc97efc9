"""A loopback OTLP/gRPC backend for benchmarks, run as its own process.

Records when each request arrived and how many spans it held, and when the root span
of each trace arrived (keyed by the first 8 bytes of the trace id). Runs until its
standard input closes, then writes the records to the .npz file named on the command
line.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import grpc
import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

EMPTY_RESPONSE = ExportTraceServiceResponse().SerializeToString()


async def serve(port: int, output: str) -> None:
    request_times: list[int] = []
    request_spans: list[int] = []
    root_keys: list[int] = []
    root_times: list[int] = []

    async def export(body: bytes, context) -> bytes:
        now = time.monotonic_ns()
        request = ExportTraceServiceRequest.FromString(body)
        count = 0
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                spans = scope_spans.spans
                count += len(spans)
                for span in spans:
                    if not span.parent_span_id:
                        root_keys.append(int.from_bytes(span.trace_id[:8], "little"))
                        root_times.append(now)
        request_times.append(now)
        request_spans.append(count)
        return EMPTY_RESPONSE

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 512 * 2**20)])
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    stdin_closed = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stdin_closed.set)), daemon=True
    ).start()
    await stdin_closed.wait()
    await server.stop(0)
    np.savez(
        output,
        request_times=np.array(request_times, dtype=np.int64),
        request_spans=np.array(request_spans, dtype=np.int64),
        root_keys=np.array(root_keys, dtype=np.uint64),
        root_times=np.array(root_times, dtype=np.int64),
    )


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), sys.argv[2]))
