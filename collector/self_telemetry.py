"""spanscore's own metrics, gathered from the components that report them, beside the scores.

Named after the OpenTelemetry Collector's `otelcol_*` metrics where one means the same,
`spanscore_*` otherwise, so a dashboard can chart throughput, refusals and queue depth
next to the scores. Each is declared beside the counter it reads, in the component that
owns the counter (`spanscore.core.telemetry`), and read when metrics are collected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from spanscore.core.telemetry import Reading, Readout, TelemetryMetric, reported


def self_telemetry(components: Iterable[object]) -> list[Readout]:
    """One readout per metric the components report, in the order first reported: read
    from every component that reports it, the readings joined as the metric declares."""
    reads: dict[TelemetryMetric, list[Callable[[], Reading]]] = {}
    for readout in reported(components):
        reads.setdefault(readout.metric, []).append(readout.read)
    return [metric.reads(_joined(metric, metric_reads)) for metric, metric_reads in reads.items()]


def _joined(metric: TelemetryMetric, reads: list[Callable[[], Reading]]) -> Callable[[], Reading]:
    return lambda: metric.join([read() for read in reads])
