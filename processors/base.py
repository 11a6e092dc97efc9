"""The processor interface: what scoring components implement.

A processor is built from its config by its component factory and driven by the
pipeline, Collector-style: `start`, then `process_trace`/`process_session` any number
of times, then `shutdown(deadline)`. Everything runs on the collector's event loop; a
processor that does blocking work must move it off the loop (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage

TraceOutput = MetricResult | EvaluatorUsage | SpanAttribute | SpanFinding
SessionOutput = MetricResult | EvaluatorUsage | SpanAttribute


class Processor:
    """Base class with no-op hooks; override the ones a processor needs.

    Data ownership:
    - `process_trace(trace, session)`: the trace and its spans are lent for the duration
      of the call. Read anything; do not mutate spans (the attacher writes scores after
      all processors ran) and do not keep references to spans after returning. Views
      shared between processors (the normalized agent trace) come from `trace.derive`.
      `session` is the trace's session (None when the trace has none) with the summaries
      of its previously scored traces; the current trace is appended after every
      processor ran. Return the metric results for this trace, plus an `EvaluatorUsage`
      for each model the processor paid to call and any `SpanAttribute` (under `eval.`)
      that the results need beside them, and any `SpanFinding` about one of the trace's
      spans (it goes on that span). The results of the processors before this one in
      the pipeline are in `trace.results` already. Traces of one session are processed
      one at a time, in the order they became ready; traces of different sessions overlap.
      The pipeline calls `process_batch`, whose default runs `process_trace` per trace.
    - `process_session(session)`: called once when the session closes (idle or
      shutdown); return session-level results (and `SpanAttribute`s for the carrier
      span). The session is lent for the call.
    - An exception from either hook is recorded as an error result for each metric the
      processor declares in `metric_names`; it never stops the trace from being exported.

    Lifecycle: `start()` once before any processing; `shutdown(deadline)` after the last,
    safe without `start` and safe twice.
    """

    metric_names: tuple[str, ...] = ()

    @property
    def uses_sessions(self) -> bool:
        """Whether the pipeline must keep sessions for this processor.

        True when `process_session` is implemented; a processor that only reads earlier
        traces of the session in `process_trace` overrides this to return True.
        """
        return type(self).process_session is not Processor.process_session

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        """The metrics `process_session` scores: `metric_names` when it is the only hook
        implemented. A processor scoring metrics per trace and per session overrides this."""
        kind = type(self)
        per_trace = (
            kind.process_trace is not Processor.process_trace or kind.process_batch is not Processor.process_batch
        )
        per_session = kind.process_session is not Processor.process_session
        return self.metric_names if per_session and not per_trace else ()

    @property
    def trace_metric_names(self) -> tuple[str, ...]:
        """The metrics scored per trace: those not scored per session."""
        per_session = set(self.session_metric_names)
        return tuple(name for name in self.metric_names if name not in per_session)

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        return None

    def provenance(self, metric_name: str) -> Provenance:
        """Who scores `metric_name` and the revision of its definition; asked after `start`.

        Code by default; a processor whose scores come from a model or a dataset says so.
        """
        return CODE_PROVENANCE

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[TraceOutput]:
        return []

    async def process_batch(
        self,
        items: Sequence[tuple[Trace, Session | None]],
    ) -> list[Sequence[TraceOutput] | BaseException]:
        """`process_trace` for each (trace, session), in one call: what the pipeline calls.

        A batch holds at most one trace per session. Returns, per item in order, its
        outputs or the exception that item raised. By default the items are processed
        concurrently; a CPU-bound processor overrides this to do the batch's work at
        once (one embedding call for all its texts, say).
        """
        if type(self).process_trace is Processor.process_trace:  # nothing to run per trace
            return [[] for _ in items]
        return await asyncio.gather(
            *(self.process_trace(trace, session) for trace, session in items), return_exceptions=True
        )

    async def process_session(self, session: Session) -> Sequence[SessionOutput]:
        return []

    async def shutdown(self, deadline: float) -> None:
        return None
