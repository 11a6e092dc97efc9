"""Scores as OpenTelemetry metrics, for dashboards of score distributions and pass rates.

Every metric result becomes one observation of the histogram `gen_ai.evaluation.score`
(buckets of 0.1 over [0, 1]) and one increment of the counter
`gen_ai.evaluation.results`, both with `gen_ai.evaluation.name`,
`gen_ai.evaluation.score.label` (`pass`, `fail`, or `error` for a result without a
score), `service.name` (the agent's) and `gen_ai.agent.name` when known. They leave
through the exporters listed in `service.pipelines.metrics` (Prometheus scrape
endpoint, OTLP gRPC or HTTP) via the SDK's MeterProvider.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource

from collector.version import VERSION
from processors.result import MetricResult

SCORE_HISTOGRAM = "gen_ai.evaluation.score"
RESULT_COUNTER = "gen_ai.evaluation.results"
JUDGE_CALLS_COUNTER = "gen_ai.evaluation.judge.calls"
JUDGE_TOKENS_COUNTER = "gen_ai.evaluation.judge.tokens"
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class ScoreMetrics:
    """Records metric results; thread-safe (the SDK instruments are)."""

    def __init__(self, readers: list[MetricReader]):
        self.provider = MeterProvider(
            metric_readers=readers,
            resource=Resource.create({"service.name": "spanscore", "service.version": VERSION}),
        )
        meter = self.provider.get_meter("spanscore", VERSION)
        self._scores = meter.create_histogram(
            SCORE_HISTOGRAM, unit="1", description="Evaluation scores in [0, 1]",
            explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
        )
        self._results = meter.create_counter(
            RESULT_COUNTER, unit="{result}", description="Evaluation results by label: pass, fail or error",
        )
        self._judge_calls = meter.create_counter(
            JUDGE_CALLS_COUNTER, unit="{request}", description="Requests sent to the LLM judge, retries included",
        )
        self._judge_tokens = meter.create_counter(
            JUDGE_TOKENS_COUNTER, unit="{token}", description="LLM judge tokens by gen_ai.token.type (input, output)",
        )

    def record(self, results: Iterable[MetricResult], service_name: str | None, agent_name: str | None) -> None:
        for result in results:
            attributes = {
                "gen_ai.evaluation.name": result.name,
                "gen_ai.evaluation.score.label": result.label or "error",
            }
            if service_name:
                attributes["service.name"] = service_name
            if agent_name:
                attributes["gen_ai.agent.name"] = agent_name
            if result.score is not None:
                self._scores.record(result.score, attributes)
            self._results.add(1, attributes)

    def record_judge_usage(self, usage: dict[str, int], service_name: str | None, agent_name: str | None) -> None:
        attributes = {}
        if service_name:
            attributes["service.name"] = service_name
        if agent_name:
            attributes["gen_ai.agent.name"] = agent_name
        self._judge_calls.add(usage.get("calls", 0), attributes)
        self._judge_tokens.add(usage.get("input_tokens", 0), {**attributes, "gen_ai.token.type": "input"})
        self._judge_tokens.add(usage.get("output_tokens", 0), {**attributes, "gen_ai.token.type": "output"})

    def shutdown(self, timeout_s: float) -> None:
        """Export what is pending and stop the readers."""
        self.provider.force_flush(int(timeout_s * 1000))
        self.provider.shutdown()
