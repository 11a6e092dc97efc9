"""spanscore's own metrics (its self-telemetry), declared by the components whose counters they read.

Each metric is a `TelemetryMetric` module constant beside the counter it reads: name,
unit, description and kind (a counter, which only grows, or a gauge). A component that
reports metrics is `ReportsTelemetry`: its `telemetry()` binds each declaration to how
it reads it (`metric.reads(lambda: self.count)`). The service gathers what its
components report and reads it whenever a metrics reader collects
(`spanscore.collector.self_telemetry`); docs/metrics.md lists every declaration, and a
test holds the page and the declarations equal.

Several components may report one metric (every exporter its sent spans): the metric's
`join` makes their readings one, by default their values summed and their series side
by side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Series = list[tuple[dict[str, str], float]]  # one value per set of attributes
# A value, one value per set of attributes, or None: nothing to report now.
Reading = float | Series | None
MetricKind = Literal["counter", "gauge"]


def total(readings: Sequence[Reading]) -> Reading:
    """The components' values summed, or their series side by side; None when none has a value."""
    present = [reading for reading in readings if reading is not None]
    if not present:
        return None
    series = [reading for reading in present if isinstance(reading, list)]
    if series:
        if len(series) < len(present):
            raise TypeError("a metric's readings are all values or all series")
        return [point for reading in series for point in reading]
    return sum(reading for reading in present if not isinstance(reading, list))


def least(readings: Sequence[Reading]) -> Reading:
    """The least of the components' values (what is left of a budget, say); None when none has one."""
    values = [reading for reading in readings if reading is not None and not isinstance(reading, list)]
    return min(values, default=None)


@dataclass(frozen=True)
class TelemetryMetric:
    """One of spanscore's own metrics, as exported: its name, UCUM unit (`{span}`, `By`,
    `s`), description and kind, and how the readings of several components are one."""

    name: str
    unit: str
    description: str
    kind: MetricKind
    join: Callable[[Sequence[Reading]], Reading] = total

    def reads(self, read: Callable[[], Reading]) -> Readout:
        """This metric, read by `read` (a component's, called whenever metrics are collected)."""
        return Readout(self, read)


@dataclass(frozen=True)
class Readout:
    """A metric and how one component reads it."""

    metric: TelemetryMetric
    read: Callable[[], Reading]


@runtime_checkable
class ReportsTelemetry(Protocol):
    """A component that reports some of spanscore's own metrics."""

    def telemetry(self) -> Iterable[Readout]:
        """Each metric this component reports, bound to how it reads it; asked once, before start."""
        ...


def reported(components: Iterable[object]) -> list[Readout]:
    """What those of `components` that report telemetry report, in their order."""
    return [readout for c in components if isinstance(c, ReportsTelemetry) for readout in c.telemetry()]
