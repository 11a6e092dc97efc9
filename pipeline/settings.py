"""The pipeline's settings, written under `processors.assembler` as the first stage's.

The assembler is the first stage and the one every pipeline has, so its config section
holds what the whole pipeline is tuned by: when traces are ready and sessions close,
how much is held, how scoring is batched and where it runs, and which traces are scored.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration, format_duration
from spanscore.core.key_path import KEY_ITSELF
from spanscore.pipeline.score_scope import ScoreScopeConfig

DEFAULT_TRACE_WAIT_S = 1.0
DEFAULT_TRACE_TIMEOUT_S = 30.0
DEFAULT_SESSION_IDLE_S = 300.0
DEFAULT_MAX_BUFFERED_SPANS = 200_000
DEFAULT_FORWARDED_TRACE_MEMORY = 100_000
DEFAULT_MAX_OPEN_SESSIONS = 50_000
DEFAULT_MAX_HOLD_S = 30.0
DEFAULT_MAX_FOLLOWING_TRACES = 5_000
DEFAULT_LATE_WINDOW_S = 600.0
DEFAULT_MAX_RESCORES = 3
DEFAULT_LATE_MEMORY_SPANS = 100_000
DEFAULT_SCORING_CONCURRENCY = 128
DEFAULT_SCORING_BATCH = 64
DEFAULT_SESSION_KEYS = (
    "session.id",
    "gen_ai.conversation.id",
    "langfuse.session.id",
    "traceloop.association.properties.session_id",
    "traceloop.association.properties.chat_id",
    "ai.settings.context.sessionId",  # the Vercel AI SDK 7's runtime context
    "ai.telemetry.metadata.sessionId",  # the Vercel AI SDK 4 to 6's telemetry metadata
)


class PipelineSettings(ComponentConfig):
    trace_wait: Duration = DEFAULT_TRACE_WAIT_S
    trace_timeout: Duration = DEFAULT_TRACE_TIMEOUT_S
    # Services known to export late (a batch span processor's schedule delay): a trace
    # with a span of one waits this long after its last span instead of trace_wait.
    trace_wait_by_service: dict[str, Duration] = Field(default_factory=dict)
    # A span whose parent has not arrived, and is not marked remote, holds its trace until
    # the parent comes or trace_timeout.
    wait_for_parents: bool = True
    session_idle: Duration = DEFAULT_SESSION_IDLE_S
    # Spans received but not yet exported by every exporter; past it receivers answer
    # "retry later" (HTTP 503 / gRPC UNAVAILABLE) instead of buffering without bound.
    max_buffered_spans: int = Field(default=DEFAULT_MAX_BUFFERED_SPANS, gt=0)
    session_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_SESSION_KEYS))
    # How long a ready trace may wait for its scoring before it leaves for the exporters
    # with the results computed by then, `eval.<metric>.pending` on its root for the
    # others, which follow on an `evaluate_trace` carrier when they come.
    max_hold: Duration = Field(default=DEFAULT_MAX_HOLD_S, gt=0)
    # Traces that left at max_hold with results still to follow, at most: past it the
    # oldest's scoring is given up, its pending metrics following as skipped. Bounds what
    # a judge that never answers costs (each such trace keeps its spans and judge calls).
    max_following_traces: int = Field(default=DEFAULT_MAX_FOLLOWING_TRACES, ge=1)
    # Traces scored at once; judge calls wait on the network, so this is what lets many
    # overlap, while CPU-bound metrics are kept from monopolizing the event loop.
    scoring_concurrency: int = Field(default=DEFAULT_SCORING_CONCURRENCY, ge=1, le=10_000)
    # Ready traces a scorer takes at once (one per session): processors then do a batch's
    # work in one go (one embedding call for all its texts), not trace by trace.
    scoring_batch: int = Field(default=DEFAULT_SCORING_BATCH, ge=1, le=4096)
    # Worker processes the processors run in (0: in the collector process). CPU-bound
    # metrics then use that many more cores; only the spans of each ready trace cross.
    scoring_workers: int = Field(default=0, ge=0, le=256)
    # Past it the least recently active session closes early, bounding session memory.
    max_open_sessions: int = Field(default=DEFAULT_MAX_OPEN_SESSIONS, gt=0)
    # How many released trace ids are remembered to recognise late spans.
    forwarded_trace_memory: int = Field(default=DEFAULT_FORWARDED_TRACE_MEMORY, ge=0)
    # Spans arriving after their trace was scored: `rescore` scores the trace again with
    # them (its results on an `evaluate_trace` carrier span, pipeline/late_rescores.py),
    # within `late_window` of its release for scoring and at most `max_rescores` times;
    # `forward` only forwards them. Re-scoring keeps a copy of the scored traces' spans,
    # at most `late_memory_spans` of them (the oldest trace is forgotten first).
    late_spans: Literal["rescore", "forward"] = "rescore"
    late_window: Duration = DEFAULT_LATE_WINDOW_S
    max_rescores: int = Field(default=DEFAULT_MAX_RESCORES, ge=1, le=1000)
    late_memory_spans: int = Field(default=DEFAULT_LATE_MEMORY_SPANS, ge=1)
    # Which traces the processors see: agent traces only unless told otherwise; the
    # others are forwarded untouched (see score_scope).
    score: ScoreScopeConfig = Field(default_factory=ScoreScopeConfig)

    @model_validator(mode="after")
    def _timeout_covers_wait(self) -> PipelineSettings:
        if self.trace_timeout < self.trace_wait:
            raise ValueError("trace_timeout must be at least trace_wait")
        problems = [
            problem
            for service, wait in self.trace_wait_by_service.items()
            if (problem := _service_wait_problem(service, wait, self.trace_wait, self.trace_timeout))
        ]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


def _service_wait_problem(
    service: str, wait: float, trace_wait: float, trace_timeout: float
) -> InitErrorDetails | None:
    if not service.strip():
        message, loc, given = "a service.name cannot be empty", ("trace_wait_by_service", service, KEY_ITSELF), service
    elif wait > trace_timeout:
        message = f"must be at most trace_timeout ({format_duration(trace_timeout)}), which releases every trace first"
        loc, given = ("trace_wait_by_service", service), format_duration(wait)
    elif wait < trace_wait:
        message = f"must be at least trace_wait ({format_duration(trace_wait)}): a service's wait lengthens it"
        loc, given = ("trace_wait_by_service", service), format_duration(wait)
    else:
        return None
    return InitErrorDetails(
        type=PydanticCustomError("service_wait", "{message}", {"message": message}), loc=loc, input=given
    )
