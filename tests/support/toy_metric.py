"""A small metric processor defined for tests: processor type `toy_metric`.

Trace metric `<name>`: score = min(1, spans / 4); raises on a root span named `fail_on`.
Session metric `<name>_session`: score = share of the session's traces that were complete.
It records what it saw so tests can check ordering and session contents.
"""

from __future__ import annotations

import asyncio

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.result import MetricResult
from spanscore.processors.base import Processor


class ToyMetricConfig(ComponentConfig):
    name: str = "toy"
    fail_on: str | None = None
    delay_s: float = 0.0


class ToyMetric(Processor):
    def __init__(self, component_id: str, config: ToyMetricConfig):
        self.config = config
        self.metric_names = (config.name,)
        self.seen: list[tuple[str | None, int, bytes]] = []  # (session id, earlier traces in session, trace id)

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return (f"{self.config.name}_session",)

    async def process_trace(self, trace, session):
        self.seen.append(
            (session.session_id if session else None, len(session.traces) if session else 0, trace.trace_id)
        )
        if self.config.delay_s:
            await asyncio.sleep(self.config.delay_s)
        anchor = trace.anchor
        if self.config.fail_on and anchor is not None and anchor.name == self.config.fail_on:
            raise RuntimeError(f"cannot score {anchor.name}")
        score = min(1.0, trace.span_count / 4)
        return [
            MetricResult(
                name=self.config.name,
                score=score,
                explanation=f"{trace.span_count} spans",
                metadata={"spans": trace.span_count},
            )
        ]

    async def process_session(self, session):
        complete = sum(1 for t in session.traces if t.complete)
        return [
            MetricResult(
                name=f"{self.config.name}_session",
                score=complete / len(session.traces),
                explanation=f"{complete} of {len(session.traces)} traces complete",
            )
        ]


FACTORY = ComponentFactory("processor", "toy_metric", ToyMetricConfig, ToyMetric)

# Its entry under a config's `processors:` (the `extra_processors` of `sink_config`).
TOY = "  toy_metric: {name: toy, fail_on: broken}"


def toy(**config) -> ToyMetric:
    return ToyMetric("toy_metric", ToyMetricConfig(**config))
