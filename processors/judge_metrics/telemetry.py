"""A judge's telemetry for spanscore's own metrics, as plain values that can cross processes.

The collector reports what its judges spent and how they are (`spanscore_judge_*`). With
`scoring_workers` the judges live in the worker processes, which send their telemetry to
the collector every `REPORT_INTERVAL_S`; a worker that exits leaves what it spent
(`spent`) in the totals, so the counters never go back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.client import OpenAIJudge
from spanscore.processors.openai_endpoint.breaker import BreakerState

REPORT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class JudgeTelemetry:
    requests: int = 0  # HTTP requests, retries and probes included
    input_tokens: int = 0
    output_tokens: int = 0
    request_seconds: float = 0.0
    breaker_state: int = BreakerState.CLOSED
    held_calls: int = 0  # calls waiting on an outage now
    refused: int = 0  # requests the hourly budget kept back
    remaining_requests: int | None = None  # None: no such cap
    remaining_tokens: int | None = None

    @classmethod
    def of(cls, judge: OpenAIJudge) -> JudgeTelemetry:
        stats, budget = judge.stats(), judge.budget
        return cls(
            requests=stats.requests,
            input_tokens=stats.input_tokens,
            output_tokens=stats.output_tokens,
            request_seconds=stats.request_seconds,
            breaker_state=int(judge.breaker.state),
            held_calls=judge.breaker.held,
            refused=budget.refused if budget is not None else 0,
            remaining_requests=budget.remaining_requests() if budget is not None else None,
            remaining_tokens=budget.remaining_tokens() if budget is not None else None,
        )


def judge_telemetry(processors: Iterable[object]) -> list[JudgeTelemetry]:
    """The telemetry of every judge the processors that call judges have built."""
    return [
        JudgeTelemetry.of(judge)
        for processor in processors
        if isinstance(processor, UsesJudges)
        for judge in processor.judges()
        if isinstance(judge, OpenAIJudge)
    ]


def spent(telemetry: Iterable[JudgeTelemetry]) -> JudgeTelemetry:
    """The counters of `telemetry` summed, without their state: what judges that are gone spent."""
    reported = list(telemetry)
    return JudgeTelemetry(
        requests=sum(f.requests for f in reported),
        input_tokens=sum(f.input_tokens for f in reported),
        output_tokens=sum(f.output_tokens for f in reported),
        request_seconds=sum(f.request_seconds for f in reported),
        refused=sum(f.refused for f in reported),
    )
