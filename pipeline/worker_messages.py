"""What the collector and a scoring worker process say to each other over their pipe.

The worker starts with a `WorkerSetup`; after that each side sends lists of messages,
one list per round of its event loop, pickled. To the worker: `ScoreTraces` (a batch's
traces for it, as their spans' bytes), `AskProgress` and `Cancel` about one of those,
`CloseSession`, and `Stop`, always last. Back: `Ready` or `StartFailed` once, then
`Answer`s and `Progress` by request id, `JudgesReport`s of what its judges spent, and
`Observed`, a round's score metrics' observations of what it prepared.
The classes keep their fields in their `__dict__`, which unpickling fills in one step
(with `__slots__` it takes a call per field).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.provenance import Provenance
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.encoded_trace import Origins
from spanscore.pipeline.score_scope import ScoreScopeConfig
from spanscore.pipeline.scoring import Scored
from spanscore.processors.base import Processor
from spanscore.processors.judge_metrics.budget import BudgetWindow
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker process needs to build the same processors as the collector."""

    processors: list[tuple[str, ComponentFactory[ComponentConfig, Processor], ComponentConfig]]
    scope: ScoreScopeConfig
    log_level: int
    # Per processor that calls judges: the hourly budget window its judges share with the
    # same processor's judges in the other workers (one judge per processor, as built in).
    budget_windows: dict[str, BudgetWindow] = field(default_factory=dict)
    span_events: bool = True  # the traces pipeline's: results as span events too
    # With score metrics configured: the processors' attributes that become labels.
    score_labels: frozenset[str] | None = None
    # Every exporter of the traces pipeline sends protobuf: a scored trace comes back
    # encoded with its scores (encoded_trace), and the collector sends those bytes.
    encode_traces: bool = False
    # The collector reads a scored trace's results and findings (a score router,
    # evaluation logs, an exporter that is not OTLP protobuf); without, an encoded
    # trace's answer carries only its scores by name, for the session's summary, and a
    # session's only its carrier.
    send_results: bool = True


# To the worker ---------------------------------------------------------------------


# A trace as its spans' bytes: its id, its session id (None for a trace outside the
# sessions), its sequence (above 1: a re-score with late spans), and its spans grouped by
# the resource and scope they came with. A tuple, not a class: one goes per trace, and
# pickling a class's instance costs 5 to 25 times a tuple's (1.5 to 7 us a trace), a
# measurable share of the collector's work per trace.
SentTrace = tuple[bytes, str | None, int, Origins]


def sent_trace(trace: Trace, session_id: str | None) -> SentTrace:
    return trace.trace_id, session_id, trace.sequence, trace_origins(trace)


def trace_origins(trace: Trace) -> Origins:
    """Its spans sliced from the request they arrived in when its bytes were kept, else
    serialized."""
    origins = []
    for origin, positions in trace.spans_by_origin.items():
        sent = origin.as_sent()
        if sent is None:
            resource = origin.resource.SerializeToString()
            scope = origin.scope_spans.scope.SerializeToString()
            spans = origin.scope_spans.spans
            data = [spans[p].SerializeToString() for p in positions]
        else:
            resource, scope, spans = sent
            data = [spans[p] for p in positions]
        origins.append((resource, scope, data, origin.resource_spans.schema_url, origin.scope_spans.schema_url))
    return origins


def received_trace(sent: SentTrace) -> Trace:
    """The worker's copy of a sent trace, its spans parsed."""
    trace_id, session_id, sequence, origins = sent
    trace = Trace(trace_id, time.monotonic())
    trace.session_id = session_id
    trace.sequence = sequence
    for resource, scope, spans, resource_schema, scope_schema in origins:
        resource_spans = ResourceSpans(schema_url=resource_schema)
        resource_spans.resource.ParseFromString(resource)
        scope_spans = resource_spans.scope_spans.add(schema_url=scope_schema)
        scope_spans.scope.ParseFromString(scope)
        origin = ScopeOrigin(resource_spans, scope_spans)
        for position, data in enumerate(spans):
            span = scope_spans.spans.add()
            span.ParseFromString(data)
            trace.add(position, span, origin)
    return trace


@dataclass(frozen=True)
class ScoreTraces:
    """Score these traces; answered with a list of `Scored`, one per trace, in order."""

    request_id: int
    traces: tuple[SentTrace, ...]
    # The traces' spans left for the exporters already (max_hold, or a re-score with late
    # spans): the answer is not prepared, its results go on carriers the collector builds.
    left: bool = False


@dataclass(frozen=True)
class AskProgress:
    """The request's traces leave now (max_hold): say what is scored so far (`Progress`),
    and answer with `Scored` not prepared, the rest of its results to follow."""

    request_id: int


@dataclass(frozen=True)
class Cancel:
    """The request's answer is not wanted any more: stop scoring it if nothing else is
    scored with it, and send no answer."""

    request_id: int


@dataclass(frozen=True)
class CloseSession:
    """Score the session and build its carrier; answered with one `Scored`."""

    request_id: int
    session_id: str
    # The traces the collector scored in the session (a worker that restarted knows
    # fewer), which the carrier links: trace id and anchor span id.
    links: tuple[tuple[bytes, bytes | None], ...]


@dataclass(frozen=True)
class Stop:
    """Answer what is in flight, shut the processors down and exit."""


STOP = Stop()

ToWorker = ScoreTraces | AskProgress | Cancel | CloseSession | Stop


# From the worker -------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The processors started; who scores each metric."""

    provenance: dict[str, Provenance]


@dataclass(frozen=True)
class StartFailed:
    """The processors could not start: the worker exits."""

    problem: str


@dataclass(frozen=True)
class Answer:
    request_id: int
    scored: Scored | list[Scored]


@dataclass(frozen=True)
class Progress:
    """Answers `AskProgress`: per trace of the request, in order, its outputs so far
    (sorted and sequenced, or its skip reason), None when it is not known (its scoring
    has not begun, or is done); and the trace metrics still being computed."""

    request_id: int
    so_far: list[Scored | None]
    pending: tuple[str, ...]


@dataclass(frozen=True)
class JudgesReport:
    """The worker's judges' telemetry, as of now."""

    telemetry: list[JudgeTelemetry]


@dataclass(frozen=True)
class Observed:
    """The score metrics' observations of what the worker prepared this round."""

    observations: ScoreObservations


FromWorker = Ready | StartFailed | Answer | Progress | JudgesReport | Observed
