"""`session_metrics` processor: agent_reliability and agent_consistency when a session closes.

Both are pure functions of the per-trace signals (confidence, loop_detection,
tool_correctness, coherence) that other processors scored on the session's traces; a
signal missing from a trace is skipped, never read as 0. Results ride on the session's
`evaluate_session` carrier span.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.session import Session
from spanscore.processors.base import Processor
from spanscore.processors.metrics.session_risk import (
    CONSISTENCY,
    DEFAULT_SIGNAL_WEIGHTS,
    RELIABILITY,
    SIGNALS,
    agent_consistency,
    agent_reliability,
    resolve_weights,
)


class SessionMetricConfig(ComponentConfig):
    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


def _known_signal(name: str) -> str:
    if name not in SIGNALS:
        raise ValueError(f"not a signal; known signals: {', '.join(SIGNALS)}")
    return name


# Each name and weight is checked apart, so every wrong one is reported; strict, as text
# or `true` is not a weight.
SignalName = Annotated[str, AfterValidator(_known_signal)]
SignalWeight = Annotated[float, Field(strict=True, ge=0.0, allow_inf_nan=False)]


class SessionMetricsConfig(ComponentConfig):
    weights: dict[SignalName, SignalWeight] = Field(default_factory=lambda: dict(DEFAULT_SIGNAL_WEIGHTS))
    agent_reliability: SessionMetricConfig = Field(default_factory=SessionMetricConfig)
    agent_consistency: SessionMetricConfig = Field(default_factory=SessionMetricConfig)

    @field_validator("weights")
    @classmethod
    def _over_the_defaults(cls, value: dict[str, float]) -> dict[str, float]:
        return resolve_weights(value)


class SessionMetrics(Processor):
    def __init__(self, component_id: str, config: SessionMetricsConfig):
        self.config = config
        self._metrics = [
            (name, function, settings)
            for name, function, settings in (
                (RELIABILITY, agent_reliability, config.agent_reliability),
                (CONSISTENCY, agent_consistency, config.agent_consistency),
            )
            if settings.enabled
        ]
        self.metric_names = tuple(name for name, _, _ in self._metrics)

    async def process_session(self, session: Session) -> list[MetricResult]:
        signals = session.signals
        results = []
        for name, function, settings in self._metrics:
            try:
                results.append(function(signals, weights=self.config.weights, threshold=settings.threshold))
            except (TypeError, ValueError) as exc:  # a processor wrote an invalid signal
                results.append(MetricResult.failure(name, exc, settings.threshold))
        return results


FACTORY = ComponentFactory("processor", "session_metrics", SessionMetricsConfig, SessionMetrics)
