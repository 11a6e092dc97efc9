"""A judge's telemetry for spanscore's own metrics, as plain values that can cross processes.

The collector reports what its judges spent and how they are (`spanscore_judge_*`,
declared here beside the figures they read): summed over every judge a scoring stage
runs (the concurrency limits too: what may be in flight to all of them), the breaker
state the worst of them (open, then half-open, then closed) and the budget left the
least. With `scoring_workers` the judges live in the worker processes,
which send their telemetry to the collector every `REPORT_INTERVAL_S`; a worker that
exits leaves what it spent (`spent`) in the totals, so the counters never go back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from spanscore.core.telemetry import Reading, Readout, TelemetryMetric, least
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.client import OpenAIJudge
from spanscore.processors.openai_endpoint.breaker import BreakerState

REPORT_INTERVAL_S = 1.0
_SEVERITY = (BreakerState.CLOSED, BreakerState.HALF_OPEN, BreakerState.OPEN)  # least to most severe


def worst_breaker_state(readings: Sequence[Reading]) -> Reading:
    """The most severe of the breaker states read; closed when there is none."""
    states = [BreakerState(int(r)) for r in readings if r is not None and not isinstance(r, list)]
    return int(max(states, key=_SEVERITY.index, default=BreakerState.CLOSED))


JUDGE_REQUESTS = TelemetryMetric(
    "spanscore_judge_requests", "{request}", "HTTP requests sent to the judge, retries and probes included", "counter"
)
JUDGE_INPUT_TOKENS = TelemetryMetric(
    "spanscore_judge_input_tokens", "{token}", "Input tokens the judge reported", "counter"
)
JUDGE_OUTPUT_TOKENS = TelemetryMetric(
    "spanscore_judge_output_tokens", "{token}", "Output tokens the judge reported", "counter"
)
JUDGE_REQUEST_DURATION = TelemetryMetric(
    "spanscore_judge_request_duration",
    "s",
    "Time spent in judge requests; over spanscore_judge_requests, the mean latency",
    "counter",
)
JUDGE_BREAKER_STATE = TelemetryMetric(
    "spanscore_judge_breaker_state",
    "1",
    "The judge's circuit breaker: 0 closed, 1 open, 2 half-open",
    "gauge",
    join=worst_breaker_state,
)
JUDGE_HELD_CALLS = TelemetryMetric(
    "spanscore_judge_held_calls", "{call}", "Judge calls held while the judge is unreachable", "gauge"
)
JUDGE_CONCURRENCY_LIMIT = TelemetryMetric(
    "spanscore_judge_concurrency_limit",
    "{request}",
    "Judge requests allowed in flight now, as adapted to how the judge answers",
    "gauge",
)
JUDGE_BUDGET_REFUSED_REQUESTS = TelemetryMetric(
    "spanscore_judge_budget_refused_requests",
    "{request}",
    "Judge requests not sent because the hourly budget was spent",
    "counter",
)
JUDGE_BUDGET_REMAINING_REQUESTS = TelemetryMetric(
    "spanscore_judge_budget_remaining_requests",
    "{request}",
    "Requests left in the judge's hourly budget",
    "gauge",
    join=least,
)
JUDGE_BUDGET_REMAINING_TOKENS = TelemetryMetric(
    "spanscore_judge_budget_remaining_tokens",
    "{token}",
    "Tokens left in the judge's hourly budget",
    "gauge",
    join=least,
)


@dataclass(frozen=True)
class JudgeTelemetry:
    requests: int = 0  # HTTP requests, retries and probes included
    input_tokens: int = 0
    output_tokens: int = 0
    request_seconds: float = 0.0
    breaker_state: int = BreakerState.CLOSED
    held_calls: int = 0  # calls waiting on an outage now
    concurrency_limit: int = 0  # requests allowed in flight now
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
            concurrency_limit=stats.concurrency_limit,
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


def judge_readouts(figures: Callable[[], list[JudgeTelemetry]]) -> list[Readout]:
    """The judges' metrics, read from `figures`: the telemetry of every judge a scoring stage runs."""
    return [
        JUDGE_REQUESTS.reads(lambda: sum(f.requests for f in figures())),
        JUDGE_INPUT_TOKENS.reads(lambda: sum(f.input_tokens for f in figures())),
        JUDGE_OUTPUT_TOKENS.reads(lambda: sum(f.output_tokens for f in figures())),
        JUDGE_REQUEST_DURATION.reads(lambda: sum(f.request_seconds for f in figures())),
        JUDGE_BREAKER_STATE.reads(lambda: worst_breaker_state([f.breaker_state for f in figures()])),
        JUDGE_HELD_CALLS.reads(lambda: sum(f.held_calls for f in figures())),
        JUDGE_CONCURRENCY_LIMIT.reads(lambda: sum(f.concurrency_limit for f in figures())),
        JUDGE_BUDGET_REFUSED_REQUESTS.reads(lambda: sum(f.refused for f in figures())),
        JUDGE_BUDGET_REMAINING_REQUESTS.reads(lambda: least([f.remaining_requests for f in figures()])),
        JUDGE_BUDGET_REMAINING_TOKENS.reads(lambda: least([f.remaining_tokens for f in figures()])),
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
