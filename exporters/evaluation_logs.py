"""The evaluation events as OTLP log records: `service.pipelines.logs`.

One log record per metric result and per finding about one span, event name
`gen_ai.evaluation.result` with the OTel GenAI evaluation attributes
(core.evaluation_event), correlated with the scored span (a trace's root for its own
results and span-level metrics' roll-ups, the span a span-level result or a finding is
about) by its trace and span id, plus `gen_ai.response.id` when the scored span has one. They
leave through the SDK's LoggerProvider, one batch processor per exporter listed in the
logs pipeline (`otlp`, `otlphttp`, `file`), with spanscore as the emitting resource.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from opentelemetry._logs import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from spanscore.core.attributes import find_attribute
from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.evaluation_event import EVALUATION_EVENT, evaluation_attributes, finding_attributes
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.span_finding import SpanFinding
from spanscore.core.version import VERSION
from spanscore.exporters.sdk_parts import create_all

RESPONSE_ID = "gen_ai.response.id"


class EvaluationLogs:
    """Emits evaluation events; thread-safe. A component: `start()` builds the exporters
    and the provider, `shutdown(deadline)` exports what is pending. Emitting before
    `start` or after `shutdown` is a no-op."""

    def __init__(self, exporters: Sequence[Callable[[Host], LogRecordExporter]]):
        self._create_exporters = list(exporters)
        self.provider: LoggerProvider | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        exporters = create_all(self._create_exporters, host)
        provider = LoggerProvider(resource=Resource.create({"service.name": "spanscore", "service.version": VERSION}))
        for exporter in exporters:
            provider.add_log_record_processor(BatchLogRecordProcessor(exporter, schedule_delay_millis=1000))
        self._logger = provider.get_logger("spanscore", VERSION)
        self.provider = provider

    def emit(
        self,
        span: Span,
        results: Iterable[MetricResult],
        provenance: Mapping[str, Provenance] | None = None,
        now_ns: int | None = None,
    ) -> None:
        """One record per result, correlated with `span`, the span the results are on;
        `provenance` by metric name (code when a metric is not in it)."""
        provenance = provenance or {}
        records = [evaluation_attributes(r, provenance.get(r.name, CODE_PROVENANCE)) for r in results]
        self._emit(span, records, now_ns)

    def emit_finding(
        self, span: Span, finding: SpanFinding, source: Provenance = CODE_PROVENANCE, now_ns: int | None = None
    ) -> None:
        """One record for a finding, correlated with `span`, the span it is about."""
        self._emit(span, [finding_attributes(finding, source)], now_ns)

    def _emit(self, span: Span, records: list[dict], now_ns: int | None) -> None:
        if self.provider is None:
            return
        now_ns = time.time_ns() if now_ns is None else now_ns
        trace_id, span_id = int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big")
        # The SDK reads a record's trace and span from its context (ids alone are deprecated).
        scored = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        context = set_span_in_context(NonRecordingSpan(scored))
        response_id = find_attribute(span.attributes, RESPONSE_ID)
        for attributes in records:
            if response_id is not None:
                attributes[RESPONSE_ID] = str(response_id)
            self._logger.emit(
                LogRecord(
                    timestamp=now_ns,
                    observed_timestamp=now_ns,
                    context=context,
                    event_name=EVALUATION_EVENT,
                    attributes=attributes,
                )
            )

    async def shutdown(self, deadline: float) -> None:
        provider, self.provider = self.provider, None
        if provider is not None:
            await asyncio.to_thread(_flush_and_stop, provider, max(0.0, deadline - time.monotonic()))


def _flush_and_stop(provider: LoggerProvider, timeout_s: float) -> None:
    provider.force_flush(int(timeout_s * 1000))
    provider.shutdown()
