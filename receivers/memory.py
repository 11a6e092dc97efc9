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

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from spanscore.core.consumer import TracesConsumer
from spanscore.receivers.ingest import ingest

DEFAULT_SERVICE_NAME = "memory"
DEFAULT_SCOPE_NAME = "spanscore.memory"


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

    async def start(self) -> None:
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
        response = ingest(self.consumer, request)
        self.accepted_requests += 1
        return response

    def send_spans(
        self,
        spans: Iterable[Span],
        service_name: str = DEFAULT_SERVICE_NAME,
        resource_attributes: Mapping[str, Any] | None = None,
        scope_name: str = DEFAULT_SCOPE_NAME,
    ) -> ExportTraceServiceResponse:
        """`send` one request holding `spans` under one resource and one scope."""
        return self.send(request_for(spans, service_name, resource_attributes, scope_name))


def request_for(
    spans: Iterable[Span],
    service_name: str = DEFAULT_SERVICE_NAME,
    resource_attributes: Mapping[str, Any] | None = None,
    scope_name: str = DEFAULT_SCOPE_NAME,
) -> ExportTraceServiceRequest:
    """An export request of `spans` under a resource with `service.name` and `resource_attributes`."""
    attributes = {"service.name": service_name, **(resource_attributes or {})}
    resource = Resource(attributes=[KeyValue(key=key, value=_any_value(value)) for key, value in attributes.items()])
    scope_spans = ScopeSpans(scope=InstrumentationScope(name=scope_name), spans=spans)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope_spans])])


def _any_value(value: Any) -> AnyValue:
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[_any_value(v) for v in value]))
    if isinstance(value, Mapping):
        return AnyValue(kvlist_value=KeyValueList(
            values=[KeyValue(key=str(k), value=_any_value(v)) for k, v in value.items()]))
    return AnyValue(string_value=str(value))
