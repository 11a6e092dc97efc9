"""Late spans: a scored trace remembered for `late_window`, scored again when spans of it
arrive later, and the results of that re-score as an `evaluate_trace` carrier span.

What a re-score needs is the trace's spans as they were scored (before scores were
written on them): each trace released for scoring leaves a copy of its spans here, as
the bytes a scoring worker gets (worker_messages: sliced from the request they arrived
in, whose bytes the intake keeps then), dropped again if it is not scored (out of the
scope). Late spans of it (a `late` trace from the assembler, forwarded to the exporters
as they are) are appended to that copy and the whole is parsed into a new trace with
the next sequence number, which is scored like any other. Its spans were sent already,
so the re-score's results go on one new span, `evaluate_trace`, in the same trace, a
child of the root and linked to it, with every result's `eval.<metric>.sequence`
(docs/score-encoding.md, "Re-scores: late spans").

Memory is bounded: at most `late_memory_spans` spans are kept, the oldest trace forgotten
first (logged), and a trace is forgotten `late_window` after its release or once it was
re-scored `max_rescores` times.

With `file_storage` each copy is on disk too (extensions/rescore_copies: its spans as
export request bytes when kept, each re-score's late spans with its sequence number,
and its forgetting), so a restart inside the late window takes the copies back
(`restore`): a late span after it re-scores with every span the trace had and the
sequence after the last one on disk.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from spanscore.core.once import SummedCount
from spanscore.core.provenance import Provenance
from spanscore.core.score_encoding import SCOPE_NAME, TRACE_SPAN_NAME, is_trace_carrier
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.core.usage import per_evaluator
from spanscore.extensions.rescore_copies import KeptCopy, RescoreCopies
from spanscore.pipeline.encoded_trace import origins_request, request_origins
from spanscore.pipeline.score_attributes import attach_attributes, attach_results, attach_usage, random_id
from spanscore.pipeline.scoring import Scored
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.worker_messages import Origins, received_trace, trace_origins

log = logging.getLogger("spanscore.pipeline")

# Traces forgotten for `late_memory_spans` are logged at most this often, summed: under
# load the bound forgets a trace for each one kept.
FORGOTTEN_LOG_INTERVAL_S = 60.0


@dataclass
class _Remembered:
    expires: float
    origins: Origins  # every span the trace has had so far, as bytes (worker_messages)
    span_count: int
    sequence: int  # of its latest scoring
    expires_at: float  # `expires` in Unix seconds, for the copy on disk


class LateRescores:
    """The scored traces awaiting late spans; on the collector's event loop."""

    def __init__(
        self,
        config: PipelineSettings,
        copies: RescoreCopies | None = None,
        wall_clock: Callable[[], float] = time.time,
    ):
        self.copies = copies  # on disk too, with file_storage
        self.wall_clock = wall_clock  # a window's end on disk outlives the process's monotonic clock
        self.window_s = config.late_window
        self.max_rescores = config.max_rescores
        self.max_spans = config.late_memory_spans
        self._traces: OrderedDict[bytes, _Remembered] = OrderedDict()  # first scored first
        self.span_count = 0
        self.forgotten = SummedCount(FORGOTTEN_LOG_INTERVAL_S)  # traces dropped for the bound before their window ended

    def __len__(self) -> int:
        return len(self._traces)

    def remember(self, trace: Trace, now: float) -> None:
        """Keep a copy of the spans of `trace`, about to be scored for the first time (its
        late spans may arrive while it is; no score is written on them yet)."""
        if trace.span_count > self.max_spans or trace.trace_id in self._traces:
            return
        self._expire(now)
        origins = trace_origins(trace)
        remembered = _Remembered(now + self.window_s, origins, trace.span_count, 1, self.wall_clock() + self.window_s)
        if self.copies is not None:
            self.copies.keep(trace.trace_id, remembered.expires_at, 1, origins_request(origins))
        self._keep(trace.trace_id, remembered)

    def restore(self, kept: list[KeptCopy], now: float) -> list[bytes]:
        """Take back the copies on disk at start (file_storage); the ids of the traces
        awaiting late spans again."""
        wall_now = self.wall_clock()
        for copy in kept:
            if copy.sequence > self.max_rescores:  # lowered since: no re-score left
                if self.copies is not None:
                    self.copies.forget(copy.trace_id)
                continue
            origins = request_origins(b"".join(copy.parts))
            spans = sum(len(spans) for _, _, spans, _, _ in origins)
            expires = now + (copy.expires_at - wall_now)
            self._keep(copy.trace_id, _Remembered(expires, origins, spans, copy.sequence, copy.expires_at))
        self._expire(now)
        return list(self._traces)

    def rescore_of(self, late: Trace, now: float) -> Trace | None:
        """The trace to score again now that the spans of `late` arrived, with every span
        it had and these, numbered with the next sequence; None when it is not remembered
        (never scored, past its window, forgotten) or was re-scored `max_rescores` times."""
        self._expire(now)
        if is_trace_carrier(late):  # another collector's re-score results: nothing new to score
            return None
        remembered = self._traces.get(late.trace_id)
        if remembered is None:
            return None
        late_origins = trace_origins(late)
        remembered.origins += late_origins
        remembered.span_count += late.span_count
        remembered.sequence += 1
        self.span_count += late.span_count
        if self.copies is not None:
            self.copies.add(late.trace_id, remembered.sequence, origins_request(late_origins))
        rescore = received_trace((late.trace_id, None, remembered.sequence, remembered.origins))
        if remembered.sequence > self.max_rescores:
            self._forget(late.trace_id)  # no further re-score: its copy is not needed
            log.info(
                "trace %s re-scored %d times (max_rescores): later spans of it are forwarded, not scored",
                late.trace_id_hex,
                self.max_rescores,
            )
        self._bound()
        return rescore

    def forget(self, trace_id: bytes) -> None:
        """Drop the copy of a trace that is not scored (out of the scope, cut off)."""
        if trace_id in self._traces:
            self._forget(trace_id)

    def _keep(self, trace_id: bytes, remembered: _Remembered) -> None:
        self._traces[trace_id] = remembered
        self.span_count += remembered.span_count
        self._bound()

    def _bound(self) -> None:
        now = time.monotonic()
        while self.span_count > self.max_spans and self._traces:
            trace_id, _ = next(iter(self._traces.items()))
            self._forget(trace_id)
            if self.forgotten.add_first(now):
                log.warning(
                    "more than %d spans kept for re-scoring (late_memory_spans): trace %s will not be scored again if "
                    "late spans of it arrive (the oldest kept; later ones are counted once a minute)",
                    self.max_spans,
                    trace_id.hex(),
                )
        count = self.forgotten.due(now)
        if count:
            log.warning(
                "%d more traces forgotten for late_memory_spans (%d): late spans of them are forwarded, not scored",
                count,
                self.max_spans,
            )

    def _forget(self, trace_id: bytes) -> None:
        remembered = self._traces.pop(trace_id)
        self.span_count -= remembered.span_count
        copies = self.copies
        if copies is not None:
            copies.forget(trace_id)
            if copies.wants_compaction:
                copies.compact(self._kept_copies())

    def _kept_copies(self) -> Iterator[KeptCopy]:
        for trace_id, remembered in self._traces.items():
            yield KeptCopy(trace_id, remembered.expires_at, remembered.sequence, [origins_request(remembered.origins)])

    def _expire(self, now: float) -> None:
        while self._traces:
            trace_id, remembered = next(iter(self._traces.items()))
            if remembered.expires > now:
                break
            self._forget(trace_id)


def trace_carrier(
    trace: Trace,
    scored: Scored,
    provenance: Mapping[str, Provenance],
    span_events: bool,
    scope_version: str,
    start_ns: int,
) -> Trace | None:
    """The `evaluate_trace` carrier of a re-score of `trace`, or of the results following
    it when it left before its scoring ended (max_hold): one span in the trace, a
    child of its anchor and linked to it, with the re-score's results (span-level metrics
    by their roll-up), attributes, usage and sequence; None when there is nothing to carry
    or no anchor to hang it on."""
    anchor = trace.anchor
    if anchor is None or not (scored.results or scored.attributes):
        return None
    origin = trace.root_origin or next(iter(trace.spans_by_origin))
    end_ns = time.time_ns()
    span = Span(
        trace_id=trace.trace_id,
        span_id=random_id(8),
        parent_span_id=anchor.span_id,
        name=TRACE_SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        status=Status(code=Status.STATUS_CODE_UNSET),
        attributes=[KeyValue(key="openinference.span.kind", value=AnyValue(string_value="EVALUATOR"))],
        links=[Span.Link(trace_id=trace.trace_id, span_id=anchor.span_id)],
    )
    attach_results(span, scored.results, now_ns=end_ns, provenance=provenance, span_events=span_events)
    attach_attributes(span, scored.attributes)  # the scoring's, `eval.<metric>.sequence` among them
    for usage in per_evaluator(scored.usages):
        attach_usage(span, usage)
    resource_spans = ResourceSpans(schema_url=origin.resource_spans.schema_url)
    resource_spans.resource.CopyFrom(origin.resource)
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.CopyFrom(InstrumentationScope(name=SCOPE_NAME, version=scope_version))
    scope_spans.spans.append(span)
    carrier = Trace(trace.trace_id, trace.last_seen)
    carrier.late = True  # its trace was sent: this span only joins it
    carrier.sequence = trace.sequence
    carrier.results = scored.results
    carrier.add(0, scope_spans.spans[0], ScopeOrigin(resource_spans, scope_spans))
    return carrier
