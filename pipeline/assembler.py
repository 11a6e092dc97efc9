"""Groups received spans into traces and decides when each trace is ready.

A trace is ready when its root span has arrived, every parent its spans name has arrived
(unless marked remote: in another process), and no span came for its wait: `trace_wait`,
or the longest of the waits `trace_wait_by_service` gives the services it has spans of. Or
`trace_timeout` after its first span, whatever it still lacks (without a root it is
marked incomplete). Spans arriving for a trace that was already released are not lost: they
form a `late` trace that is forwarded after `trace_wait` (and, with `late_spans:
rescore`, makes the scheduler score its trace again: late_rescores).
A released trace carries its session id: the first of `session_keys` found on it.

The assembler is synchronous and takes the time as an argument, so the pipeline drives
it from the event loop and tests drive it with a hand-held clock.
"""

from __future__ import annotations

from collections import OrderedDict

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from spanscore.core.attributes import any_value_to_python, find_attribute
from spanscore.core.component import ComponentFactory
from spanscore.core.consumer import ConsumeOutcome
from spanscore.core.quoting import excerpt
from spanscore.core.request_wire import RequestWire
from spanscore.core.trace import PARENT_IS_REMOTE, ScopeOrigin, Trace
from spanscore.pipeline.settings import PipelineSettings


class Assembler:
    """Buffers spans by trace id until their trace is ready."""

    def __init__(self, config: PipelineSettings):
        self.config = config
        self._traces: dict[bytes, Trace] = {}  # insertion order == first-seen order
        # Per wait, traces least recently touched first: each queue's head is the next
        # of its traces to become quiet, so the ready check costs no scan per trace.
        self._idle: dict[float, OrderedDict[bytes, None]] = {config.trace_wait: OrderedDict()}
        for wait in config.trace_wait_by_service.values():
            self._idle.setdefault(wait, OrderedDict())
        self._service_waits = config.trace_wait_by_service
        # The waits a service lengthened past trace_wait, by trace id (the others wait trace_wait).
        self._waits: dict[bytes, float] = {}
        self._forwarded: OrderedDict[bytes, None] = OrderedDict()
        # Session key -> its rank (the lowest wins): one lookup per attribute read; a trace
        # without a session id has every attribute of every span read.
        self._session_ranks: dict[str, int] = {}
        for rank, key in enumerate(config.session_keys):
            self._session_ranks.setdefault(key, rank)
        self.buffered_spans = 0

    def __len__(self) -> int:
        return len(self._traces)

    def add(
        self, request: ExportTraceServiceRequest, now: float, record: int | None = None, wire: RequestWire | None = None
    ) -> ConsumeOutcome:
        """Take every valid span of `request`; spans with invalid ids are rejected.

        `record` is the request's sequence number in the write-ahead log, if one is kept;
        `wire` its bytes, kept with its spans when given (ScopeOrigin.as_sent).
        """
        traces = self._traces
        default_wait = self.config.trace_wait
        lengthened: dict[bytes, float] = {}  # trace id -> the longest wait its new spans' services give
        touched: dict[bytes, Trace] = {}
        accepted = rejected = 0
        error = None
        for resource_index, resource_spans in enumerate(request.resource_spans):
            service_wait = self._service_wait(resource_spans.resource)
            lengthens = service_wait > default_wait
            for scope_index, scope_spans in enumerate(resource_spans.scope_spans):
                origin = ScopeOrigin(resource_spans, scope_spans, record, wire, (resource_index, scope_index))
                for position, span in enumerate(scope_spans.spans):
                    trace_id = span.trace_id
                    problem = _id_problem(trace_id, span.span_id, span.parent_span_id)
                    if problem is not None:
                        rejected += 1
                        error = error or problem
                        continue
                    trace = touched.get(trace_id)
                    if trace is None:
                        trace = traces.get(trace_id)
                        if trace is None:
                            trace = Trace(trace_id, now, late=trace_id in self._forwarded)
                            traces[trace_id] = trace
                        touched[trace_id] = trace
                    trace.add(position, span, origin)
                    accepted += 1
                    if lengthens and service_wait > lengthened.get(trace_id, 0.0):
                        lengthened[trace_id] = service_wait
        waits = self._waits
        queues = self._idle
        for trace_id, trace in touched.items():
            trace.last_seen = now
            wait = waits.get(trace_id, default_wait)
            longer = lengthened.get(trace_id, 0.0)
            if longer > wait and not trace.late:  # late spans go on as they are
                queues[wait].pop(trace_id, None)
                wait = waits[trace_id] = longer
            queue = queues[wait]
            queue[trace_id] = None
            queue.move_to_end(trace_id)
        self.buffered_spans += accepted
        return ConsumeOutcome(accepted, rejected, error)

    def pop_ready(self, now: float) -> list[Trace]:
        """Release the traces that are ready at `now`."""
        timed_out: list[Trace] = []
        timeout_before = now - self.config.trace_timeout
        for trace in self._traces.values():
            if trace.first_seen > timeout_before:
                break
            timed_out.append(trace)
        for trace in timed_out:
            self._release(trace.trace_id)

        quiet: list[Trace] = []
        parked: list[tuple[OrderedDict[bytes, None], bytes]] = []
        for wait, queue in self._idle.items():
            wait_before = now - wait
            for trace_id in queue:
                trace = self._traces[trace_id]
                if trace.last_seen > wait_before:
                    break
                if trace.late or (trace.complete and not (self.config.wait_for_parents and _lacks_parent(trace))):
                    quiet.append(trace)
                else:
                    parked.append((queue, trace_id))
        for queue, trace_id in parked:
            # Parked until a new span (maybe the root or the parent) arrives or the timeout
            # fires, so traces still lacking one are not rescanned on every tick.
            del queue[trace_id]
        for trace in quiet:
            self._release(trace.trace_id)
        return timed_out + quiet

    def pop_all(self) -> list[Trace]:
        """Release everything (shutdown): traces without a root go out marked incomplete."""
        ready = list(self._traces.values())
        for trace in ready:
            self._release(trace.trace_id)
        return ready

    def next_deadline(self) -> float | None:
        """The earliest time at which `pop_ready` could release something."""
        deadlines = []
        if self._traces:
            deadlines.append(next(iter(self._traces.values())).first_seen + self.config.trace_timeout)
        for wait, queue in self._idle.items():
            if queue:
                deadlines.append(self._traces[next(iter(queue))].last_seen + wait)
        return min(deadlines, default=None)

    def session_id_of(self, trace: Trace) -> str | None:
        """The first session key found: root span, then other spans, then resources."""
        if not self._session_ranks:
            return None
        for attributes in trace.attribute_lists():
            found = _session_value(attributes, self._session_ranks)
            if found:
                return found
        return None

    def _release(self, trace_id: bytes) -> None:
        trace = self._traces.pop(trace_id)
        if not trace.late:  # late spans are forwarded as they are, outside any session
            trace.session_id = self.session_id_of(trace)
        self._idle[self._waits.pop(trace_id, self.config.trace_wait)].pop(trace_id, None)
        self.buffered_spans -= trace.span_count
        self.forwarded([trace_id])

    def forwarded(self, trace_ids: list[bytes]) -> None:
        """These traces were released: spans of them arriving from now on are late (also
        after a restart, for the traces awaiting late spans then)."""
        if not self.config.forwarded_trace_memory:
            return
        for trace_id in trace_ids:
            self._forwarded[trace_id] = None
            self._forwarded.move_to_end(trace_id)
            if len(self._forwarded) > self.config.forwarded_trace_memory:
                self._forwarded.popitem(last=False)

    def _service_wait(self, resource: Resource) -> float:
        """How long a trace with a span of this resource's service waits after its last span."""
        wait = self.config.trace_wait
        if self._service_waits:  # read once per resource, not per span
            service = find_attribute(resource.attributes, "service.name")
            if isinstance(service, str):
                wait = self._service_waits.get(service, wait)
        return wait


def _lacks_parent(trace: Trace) -> bool:
    """A span of `trace` names a parent that has not arrived and is not marked remote.

    Read when the trace goes quiet, rather than kept per span as spans arrive: sets of
    ids held for every buffered trace would cost more memory than the spans' own index."""
    span_ids = set()
    parents = set()
    for origin, positions in trace.spans_by_origin.items():  # trace.spans() without its tuples
        spans = origin.scope_spans.spans
        for position in positions:
            span = spans[position]
            span_ids.add(span.span_id)
            parent = span.parent_span_id
            if parent and (span.flags & PARENT_IS_REMOTE) != PARENT_IS_REMOTE:
                parents.add(parent)
    return not parents <= span_ids


def _session_value(attributes, ranks: dict[str, int]) -> str | None:
    best_rank, best = len(ranks), None
    for kv in attributes:
        rank = ranks.get(kv.key)
        if rank is not None and rank < best_rank:
            value = any_value_to_python(kv.value)
            if value not in (None, "", [], {}):
                best_rank, best = rank, str(value)
    return best


def _id_problem(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> str | None:
    # The ids are the client's bytes: quoted cut short, as the message is answered and logged.
    if len(trace_id) != 16 or not any(trace_id):
        return f"span with invalid trace_id {excerpt(trace_id.hex()) or '(empty)'}: must be 16 bytes, not all zero"
    if len(span_id) != 8 or not any(span_id):
        return (
            f"span with invalid span_id {excerpt(span_id.hex()) or '(empty)'} in trace {trace_id.hex()}: "
            "must be 8 bytes, not all zero"
        )
    if parent_span_id and len(parent_span_id) != 8:
        return (
            f"span {span_id.hex()} has an invalid parent_span_id {excerpt(parent_span_id.hex())}: "
            "must be empty or 8 bytes"
        )
    return None


# Configured under `processors` as in the Collector's YAML, but built by the service itself;
# its settings are the whole pipeline's.
FACTORY = ComponentFactory("stage", "assembler", PipelineSettings, None)
