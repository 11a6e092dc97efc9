"""An assembled trace: the received spans of one trace id, still as OTLP protobuf.

Spans are not copied on receipt: a `Trace` holds, per `ScopeOrigin` (the resource and
scope they arrived under), the positions of its spans in the parsed export request, so
they can be forwarded with their resource, scope and schema URLs exactly as sent.
Positions rather than span objects: a Python wrapper per buffered span would put
hundreds of thousands of objects under the cyclic garbage collector, whose full passes
then stall the event loop for hundreds of milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from spanscore.core.attributes import find_attribute
from spanscore.core.request_wire import RequestWire

if TYPE_CHECKING:
    from spanscore.core.result import MetricResult

# Span.flags bits (trace.proto): the parent's is_remote is known, and it is remote.
# Producers before OTLP 1.1 leave both unset (unknown): such a parent counts as local.
PARENT_IS_REMOTE = 0x100 | 0x200


class ScopeOrigin:
    """The ResourceSpans and ScopeSpans a group of spans arrived in (read-only), the
    write-ahead log's sequence number of the request they came in, when it is on, and
    the request's bytes with this ScopeSpans' place in it, when kept."""

    __slots__ = ("resource_spans", "scope_spans", "record", "wire", "wire_place")

    def __init__(
        self,
        resource_spans: ResourceSpans,
        scope_spans: ScopeSpans,
        record: int | None = None,
        wire: RequestWire | None = None,
        wire_place: tuple[int, int] = (0, 0),  # (resource spans, scope spans) index in the request
    ):
        self.resource_spans = resource_spans
        self.scope_spans = scope_spans
        self.record = record
        self.wire = wire
        self.wire_place = wire_place

    @property
    def resource(self) -> Resource:
        return self.resource_spans.resource

    def as_sent(self) -> tuple[bytes, bytes, Sequence[bytes]] | None:
        """The resource's, the scope's and the spans' bytes as they arrived, or None
        when the request's bytes were not kept or cannot be sliced."""
        if self.wire is None:
            return None
        return self.wire.origin(*self.wire_place, len(self.scope_spans.spans))


def is_local_root(span: Span) -> bool:
    """A span with no parent, or whose parent lives in another process."""
    return not span.parent_span_id or (span.flags & PARENT_IS_REMOTE) == PARENT_IS_REMOTE


class Trace:
    """Spans of one trace id, plus what the processors learn about them.

    Ownership: the assembler builds a Trace and hands it to the pipeline once ready;
    from then on processors may read every span and mutate none; the score attacher adds
    attributes and events to the root, and events to a span a finding is about.
    Exporters read it afterwards and never mutate it. A Trace is touched by one task at a time.
    """

    __slots__ = (
        "trace_id",
        "spans_by_origin",
        "span_count",
        "root",
        "root_origin",
        "first_seen",
        "last_seen",
        "session_id",
        "late",
        "sequence",
        "results",
        "span_results",
        "derived",
        "encoded",
        "undelivered",
        "_pending_exports",
        "_on_exported",
    )

    def __init__(self, trace_id: bytes, now: float, late: bool = False):
        self.trace_id = trace_id
        self.spans_by_origin: dict[ScopeOrigin, list[int]] = {}  # positions in origin.scope_spans.spans
        self.span_count = 0
        self.root: Span | None = None
        self.root_origin: ScopeOrigin | None = None
        self.first_seen = now
        self.last_seen = now
        self.session_id: str | None = None
        self.late = late  # spans of a trace already forwarded: exported as they are
        # Which scoring of the trace this is: 1 the first, 2.. a re-score with late spans.
        self.sequence = 1
        # Filled in once by the pipeline after scoring; an empty tuple until then keeps
        # unscored traces from allocating a list each.
        self.results: Sequence[MetricResult] = ()
        self.span_results: Sequence[MetricResult] = ()  # each about the span it names
        # Views computed from the spans (the normalized agent trace) and shared by the
        # processors while the trace is scored; emptied before it is exported.
        self.derived: dict[str, Any] | None = None
        # The spans with their scores as ExportTraceServiceRequest field bytes, when a
        # scoring worker encoded them; exporters that send protobuf send these, and the
        # span objects here stay as received (only such exporters get such traces).
        self.encoded: bytes | None = None
        # An exporter gave up on it while its backend could still take it (down past the
        # retry budget or the shutdown deadline): a write-ahead log keeps it for replay.
        self.undelivered = False
        self._pending_exports = 0
        self._on_exported: Callable[[Trace], None] | None = None

    @property
    def complete(self) -> bool:
        """The root span arrived; a trace without one was released by timeout or shutdown."""
        return self.root is not None

    @property
    def logged(self) -> bool:
        """Every span is in the write-ahead log: given up on undelivered, it is kept there
        and sent again after the next start."""
        return bool(self.spans_by_origin) and all(origin.record is not None for origin in self.spans_by_origin)

    @property
    def trace_id_hex(self) -> str:
        return self.trace_id.hex()

    def add(self, position: int, span: Span, origin: ScopeOrigin) -> None:
        """Record the span at `position` of `origin.scope_spans.spans`."""
        positions = self.spans_by_origin.get(origin)
        if positions is None:
            self.spans_by_origin[origin] = [position]
        else:
            positions.append(position)
        self.span_count += 1
        if is_local_root(span) and (self.root is None or (self.root.parent_span_id and not span.parent_span_id)):
            # A span whose parent is remote (a tool server's, a sub-agent's) stands in
            # for the root until the run's own root, with no parent at all, arrives.
            self.root = span
            self.root_origin = origin

    def spans(self) -> Iterator[tuple[Span, Resource]]:
        """Every span with the resource it came with, in arrival order per origin."""
        for origin, positions in self.spans_by_origin.items():
            resource = origin.resource
            spans = origin.scope_spans.spans
            for position in positions:
                yield spans[position], resource

    @property
    def anchor(self) -> Span | None:
        """The span scores go on: the root, or without one the earliest-starting span."""
        if self.root is not None:
            return self.root
        return min((span for span, _ in self.spans()), key=lambda s: s.start_time_unix_nano, default=None)

    @property
    def start_time_unix_nano(self) -> int:
        if self.root is not None:
            return self.root.start_time_unix_nano
        return min((span.start_time_unix_nano for span, _ in self.spans()), default=0)

    @property
    def service_name(self) -> str | None:
        origin = self.root_origin or next(iter(self.spans_by_origin), None)
        return None if origin is None else find_attribute(origin.resource.attributes, "service.name")

    def attribute_lists(self) -> Iterator[Any]:
        """Attribute lists in the order trace-level keys are looked up: the root span,
        the other spans, then the resources they came with (the session id, a case id)."""
        root = self.root
        if root is not None:
            yield root.attributes
        for span, _ in self.spans():
            if span is not root:
                yield span.attributes
        for origin in self.spans_by_origin:
            yield origin.resource.attributes

    def derive(self, key: str, build: Callable[[Trace], Any]) -> Any:
        """`build(self)`, computed once per trace and shared until `release_derived`."""
        derived = self.derived
        if derived is None:
            derived = self.derived = {}
        value = derived.get(key)
        if value is None:
            value = derived[key] = build(self)
        return value

    def release_derived(self) -> None:
        self.derived = None

    # Export accounting: the pipeline counts a trace's spans as held until every
    # exporter has finished with it, which is what bounds memory end to end.
    def expect_exports(self, count: int, on_exported: Callable[[Trace], None]) -> None:
        self._pending_exports = count
        self._on_exported = on_exported

    def export_done(self, undelivered: bool = False) -> None:
        if undelivered:
            self.undelivered = True
        self._pending_exports -= 1
        if self._pending_exports == 0 and self._on_exported is not None:
            callback, self._on_exported = self._on_exported, None
            callback(self)
