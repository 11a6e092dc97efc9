"""Routing traces to exporters by their scores: what a router decides, per trace.

The pipeline's fan-out asks its router (at most one, such as `score_router`) once a
trace's or a session carrier's results are known, and hands the trace only to the
exporters the route names; an empty set drops it, None sends it everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from spanscore.core.result import MetricResult


@dataclass(frozen=True)
class Route:
    exporters: frozenset[str] | None  # exporter ids; None: every exporter of the pipeline
    matched: tuple[str, ...] = ()  # names of the routes that matched, to mark the span with


class TraceRouter(Protocol):
    def route(self, results: Sequence[MetricResult], trace_id: bytes) -> Route: ...
