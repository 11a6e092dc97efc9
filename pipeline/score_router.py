"""`score_router`: send each trace to exporters chosen by its scores.

Listed among the processors, as in the Collector's YAML, but it scores nothing: the
pipeline's fan-out stage asks it, per trace, which exporters the trace goes to.

In the style of the Collector's routing connector: a table of routes, each a condition
on the trace's results and the exporters (of the traces pipeline) it goes to, and
`default_exporters` for traces no route matches. Every route that matches adds its
exporters; a route may keep only a share of its traces (`sample_ratio`, by trace id, so
every replica keeps the same ones), and a trace it samples out is not sent to the
default. A trace routed to no exporter is dropped (counted). The names
of the matched routes are written on the scored span as `eval.route`, so what is kept
can be filtered on downstream too.

    score_router:
      default_exporters: []                           # traces without scores: dropped
      table:
        - name: failing                               # any metric failed or errored
          when: {label: [fail, error]}
          exporters: [otlphttp/review, otlp/expensive]
        - name: passing_sample                        # every metric passed: keep 10%
          when: {label: pass, every: true}
          exporters: [otlp/expensive]
          sample_ratio: 0.1

Conditions look at the results of this trace (a session carrier's: the session's):
`metric` (a name; default any), `label` (`pass`, `fail`, `error`, or a list),
`score_below` / `score_at_least`, and `every` (all of those results must match, and
there is at least one, instead of any one). Turns of a session are routed on their own
results, before the session closes; the carrier is routed on the session's.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field, field_validator, model_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.result import MetricResult
from spanscore.core.routing import Route
from spanscore.core.sampling import trace_id_sampled

LABELS = ("pass", "fail", "error")


class Condition(ComponentConfig):
    metric: str | None = None
    label: list[str] | None = None
    score_below: float | None = None
    score_at_least: float | None = None
    every: bool = False

    @field_validator("label", mode="before")
    @classmethod
    def _one_or_many(cls, value):
        return [value] if isinstance(value, str) else value

    @field_validator("label")
    @classmethod
    def _known_labels(cls, value: list[str] | None) -> list[str] | None:
        for label in value or ():
            if label not in LABELS:
                raise ValueError(f"label must be one of {', '.join(LABELS)}, got {label!r}")
        return value

    def holds(self, results: Sequence[MetricResult]) -> bool:
        relevant = [r for r in results if self.metric is None or r.name == self.metric]
        if not relevant:
            return False
        check = all if self.every else any
        return check(self._matches(r) for r in relevant)

    def _matches(self, result: MetricResult) -> bool:
        if self.label is not None and (result.label or "error") not in self.label:
            return False
        if self.score_below is not None and not (result.score is not None and result.score < self.score_below):
            return False
        return self.score_at_least is None or (result.score is not None and result.score >= self.score_at_least)


class RouteConfig(ComponentConfig):
    name: str = ""  # unnamed: the table names it by its position
    when: Condition
    exporters: list[str] = Field(min_length=1)
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)


class ScoreRouterConfig(ComponentConfig):
    table: list[RouteConfig] = Field(min_length=1)
    default_exporters: list[str] | None = None  # None: every exporter of the pipeline

    @field_validator("table", mode="before")
    @classmethod
    def _named(cls, table):
        # An unnamed route is called by its position, as it is marked on the spans.
        if isinstance(table, list):
            routes = (dict(route) if isinstance(route, RouteConfig) else route for route in table)
            return [
                {**route, "name": route.get("name") or f"route{i}"} if isinstance(route, dict) else route
                for i, route in enumerate(routes)
            ]
        return table

    @model_validator(mode="after")
    def _unique_names(self) -> ScoreRouterConfig:
        names = [route.name for route in self.table]
        if len(set(names)) != len(names):
            raise ValueError("route names must be unique")
        return self

    def exporter_ids(self) -> set[str]:
        """Every exporter the routes name, checked against the pipeline by the config."""
        return {e for route in self.table for e in route.exporters} | set(self.default_exporters or ())


class ScoreRouter:
    """A TraceRouter: the fan-out asks it where each trace goes; it holds no resources."""

    def __init__(self, component_id: str, config: ScoreRouterConfig):
        self.id = component_id
        self.config = config

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        pass

    async def shutdown(self, deadline: float) -> None:
        pass

    def route(self, results: Sequence[MetricResult], trace_id: bytes) -> Route:
        exporters: set[str] = set()
        matched: list[str] = []
        held = False
        for route in self.config.table:
            if route.when.holds(results):
                held = True  # sampled out or not, the trace is this route's: no default
                if trace_id_sampled(trace_id, route.sample_ratio):
                    exporters.update(route.exporters)
                    matched.append(route.name)
        if held:
            return Route(frozenset(exporters), tuple(matched))
        default = self.config.default_exporters
        return Route(None if default is None else frozenset(default))


FACTORY = ComponentFactory("stage", "score_router", ScoreRouterConfig, ScoreRouter)
