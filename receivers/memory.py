"""An in-memory receiver: requests handed over by a call instead of read from a socket.

For code that builds a `Pipeline` directly (tests, embedders), as httpx's MockTransport
stands in for the network. A request goes through the same steps as in the OTLP
receivers: `check_capacity` first, then `ingest`, so the caller sees the response a
client would get (partial success included) or the exception a receiver maps to a
status: `ConsumerFull` (HTTP 503 / gRPC UNAVAILABLE) or `InvalidRequest` (HTTP 400 /
gRPC INVALID_ARGUMENT).

Not in the config's component table: there is nothing to configure a socket-less
receiver with.
"""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.consumer import TracesConsumer
from spanscore.receivers.ingest import accept


class MemoryReceiver:
    """Hands requests to `consumer` on the caller's thread (the collector's event loop).

    Lifecycle: `start` and `shutdown` hold no resources; requests are taken before
    `start` too (nothing listens, so nothing needs opening), and refused with a
    RuntimeError once `shutdown` was called, as a stopped receiver takes no more input.
    Ownership: as with `TracesConsumer.consume`, a request sent is the consumer's; the
    caller must not read or mutate it afterwards.
    """

    def __init__(self, consumer: TracesConsumer, component_id: str = "memory"):
        self.id = component_id
        self.consumer = consumer
        self.accepted_requests = 0
        self._shut_down = False

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        if self._shut_down:
            raise RuntimeError(f"receiver {self.id} is shut down; it cannot start again")

    async def shutdown(self, deadline: float) -> None:
        self._shut_down = True

    def send(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """Deliver `request` as an OTLP receiver would and return the response.

        Raises ConsumerFull (retry after `retry_after_s`), InvalidRequest (every span was
        invalid), or RuntimeError after `shutdown`.
        """
        if self._shut_down:
            raise RuntimeError(f"receiver {self.id} is shut down and takes no more requests")
        self.consumer.check_capacity()  # before the parse, as the socket receivers do
        response, _ = accept(self.consumer, request)
        self.accepted_requests += 1
        return response
