"""spanscore's self-telemetry: its own metrics, reported beside the scores through the metrics pipeline.

Named after the OpenTelemetry Collector's `otelcol_*` metrics where one means the same,
`spanscore_*` otherwise, so a dashboard can chart throughput, refusals and queue depth
next to the scores. Each is read from the pipeline's counters when metrics are collected.

The judges' telemetry (`spanscore_judge_*`) are summed over every judge the processors
built, in this process and in the scoring workers (as each last reported, about every
second); the breaker state is the worst of them (open, then half-open, then closed) and
the budget left the least.
"""

from __future__ import annotations

from collections.abc import Callable

from spanscore.exporters.base import DROP_REASONS
from spanscore.exporters.score_metrics import TelemetryMetric
from spanscore.pipeline.memory_limiter import MemoryLimiter
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry, judge_telemetry
from spanscore.processors.openai_endpoint.breaker import BreakerState

_SEVERITY = (BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN)  # least to most severe


def pipeline_telemetry(pipeline: Pipeline) -> list[TelemetryMetric]:
    return [
        TelemetryMetric(
            "otelcol_receiver_accepted_spans",
            "{span}",
            "Spans accepted by the receivers",
            lambda: pipeline.counts.received_spans,
        ),
        TelemetryMetric(
            "spanscore_receiver_rejected_spans",
            "{span}",
            "Malformed spans dropped from otherwise valid requests",
            lambda: pipeline.counts.rejected_spans,
        ),
        TelemetryMetric(
            "spanscore_receiver_refused_requests",
            "{request}",
            "Requests turned away while the pipeline was full, for the client to retry",
            lambda: pipeline.counts.refused_requests,
        ),
        TelemetryMetric(
            "spanscore_pipeline_exported_traces",
            "{trace}",
            "Traces handed to every exporter",
            lambda: pipeline.counts.exported_traces,
        ),
        TelemetryMetric(
            "spanscore_pipeline_unscored_traces",
            "{trace}",
            "Traces forwarded outside the scoring scope",
            lambda: pipeline.counts.unscored_traces,
        ),
        TelemetryMetric(
            "spanscore_router_dropped_traces",
            "{trace}",
            "Traces the score_router sent to no exporter",
            lambda: pipeline.counts.routed_out_traces,
        ),
        TelemetryMetric(
            "otelcol_exporter_send_failed_spans",
            "{span}",
            "Spans the exporters gave up on, by exporter and "
            "reason (refused for good, retries exhausted, shutdown deadline)",
            lambda: [
                ({"exporter": e.id, "reason": reason}, e.dropped_by_reason[reason])
                for e in pipeline.exporters
                for reason in DROP_REASONS
            ],
        ),
        TelemetryMetric(
            "otelcol_exporter_sent_spans",
            "{span}",
            "Spans the exporters sent, by exporter",
            lambda: [({"exporter": e.id}, e.sent_spans) for e in pipeline.exporters],
        ),
        TelemetryMetric(
            "spanscore_exporter_stored_spans",
            "{span}",
            "Spans waiting in the exporters' persistent sending queues (sending_queue.storage)",
            lambda: sum(getattr(e, "stored_spans", 0) for e in pipeline.exporters),
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_pipeline_held_spans",
            "{span}",
            "Spans held: assembling, scoring or exporting",
            lambda: pipeline.counts.held_spans,
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_pipeline_held_spans_limit",
            "{span}",
            "The held-spans bound past which requests are refused",
            lambda: pipeline.counts.max_held_spans,
            monotonic=False,
        ),
        *judge_telemetry_metrics(pipeline),
        *write_ahead_telemetry(pipeline),
        *scoring_worker_telemetry(pipeline),
    ]


def judge_telemetry_metrics(pipeline: Pipeline) -> list[TelemetryMetric]:
    """What the judges spent and how they are, when a processor calls judges: those of this
    process, and those of the scoring workers (as they last reported)."""
    local = [p for _, p in pipeline.processors if isinstance(p, UsesJudges)]
    workers = pipeline.workers
    if not local and (workers is None or not workers.uses_judges):
        return []

    def judges() -> list[JudgeTelemetry]:
        return judge_telemetry(local) + (workers.judge_telemetry() if workers is not None else [])

    def total(field: str) -> Callable[[], float]:
        return lambda: sum(getattr(j, field) for j in judges())

    def least(field: str) -> Callable[[], int | None]:
        def read() -> int | None:
            return min((v for v in (getattr(j, field) for j in judges()) if v is not None), default=None)

        return read

    def breaker_state() -> int:
        return max((BreakerState(j.breaker_state) for j in judges()), key=_SEVERITY.index, default=BreakerState.CLOSED)

    return [
        TelemetryMetric(
            "spanscore_judge_requests",
            "{request}",
            "HTTP requests sent to the judge, retries and probes included",
            total("requests"),
        ),
        TelemetryMetric(
            "spanscore_judge_input_tokens", "{token}", "Input tokens the judge reported", total("input_tokens")
        ),
        TelemetryMetric(
            "spanscore_judge_output_tokens", "{token}", "Output tokens the judge reported", total("output_tokens")
        ),
        TelemetryMetric(
            "spanscore_judge_request_duration",
            "s",
            "Time spent in judge requests; over spanscore_judge_requests, the mean latency",
            total("request_seconds"),
        ),
        TelemetryMetric(
            "spanscore_judge_breaker_state",
            "1",
            "The judge's circuit breaker: 0 closed, 1 open, 2 half-open",
            breaker_state,
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_judge_held_calls",
            "{call}",
            "Judge calls held while the judge is unreachable",
            total("held_calls"),
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_judge_budget_refused_requests",
            "{request}",
            "Judge requests not sent because the hourly budget was spent",
            total("refused"),
        ),
        TelemetryMetric(
            "spanscore_judge_budget_remaining_requests",
            "{request}",
            "Requests left in the judge's hourly budget",
            least("remaining_requests"),
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_judge_budget_remaining_tokens",
            "{token}",
            "Tokens left in the judge's hourly budget",
            least("remaining_tokens"),
            monotonic=False,
        ),
    ]


def memory_limiter_telemetry(limiter: MemoryLimiter) -> list[TelemetryMetric]:
    return [
        TelemetryMetric(
            "spanscore_memory_limiter_refused_requests",
            "{request}",
            "Requests turned away while memory use was above the memory_limiter's soft limit, for the client to retry",
            lambda: limiter.refused_requests,
        ),
    ]


def write_ahead_telemetry(pipeline: Pipeline) -> list[TelemetryMetric]:
    wal = pipeline.write_ahead
    if wal is None:
        return []
    return [
        TelemetryMetric(
            "spanscore_write_ahead_requests",
            "{request}",
            "Requests written to the write-ahead log before their answer",
            lambda: wal.written_requests,
        ),
        TelemetryMetric(
            "spanscore_write_ahead_replayed_spans",
            "{span}",
            "Spans replayed from the write-ahead log at start",
            lambda: pipeline.counts.replayed_spans,
        ),
        TelemetryMetric(
            "spanscore_write_ahead_pending_requests",
            "{request}",
            "Requests in the write-ahead log not yet exported by every exporter",
            lambda: wal.pending_requests,
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_write_ahead_size",
            "By",
            "Bytes of write-ahead log on disk",
            lambda: wal.bytes_on_disk,
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_write_ahead_size_limit",
            "By",
            "The write-ahead log size past which requests are refused",
            lambda: wal.max_bytes,
            monotonic=False,
        ),
    ]


def scoring_worker_telemetry(pipeline: Pipeline) -> list[TelemetryMetric]:
    workers = pipeline.workers
    if workers is None:
        return []
    return [
        TelemetryMetric(
            "spanscore_scoring_workers_in_flight",
            "{trace}",
            "Traces and sessions out with a scoring worker",
            lambda: workers.in_flight,
            monotonic=False,
        ),
        TelemetryMetric(
            "spanscore_scoring_workers_restarts",
            "{process}",
            "Scoring worker processes started again after they exited",
            lambda: workers.restarts,
        ),
    ]
