"""What the pipeline hands scored traces to: the trace exporter contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from spanscore.core.component import Component
from spanscore.core.trace import Trace


@runtime_checkable
class TraceExporter(Component, Protocol):
    """Takes scored traces from the pipeline; a Component (start, shutdown(deadline)).

    Threading: called on the collector's event loop. Ownership: a trace is lent
    read-only; the exporter calls `trace.export_done()` exactly once per enqueued trace,
    after it was sent or given up on (counted in `dropped_spans`, or in `kept_spans` when
    the write-ahead log keeps it: `trace.logged`), and keeps no reference afterwards:
    until then the pipeline counts its spans as held. `enqueue` must not block; after
    `shutdown` began it raises.
    """

    id: str  # the component id, which routes name
    sent_spans: int
    dropped_spans: int
    kept_spans: int  # given up on undelivered, kept by the write-ahead log for the next start
    dropped_by_reason: Mapping[str, int]  # the same spans by why: refused, retries_exhausted, shutdown

    def enqueue(self, trace: Trace) -> None: ...
