"""The scoring stage: the processors over a batch of traces or one closing session.

One interface, `Scoring`, two places to run: `LocalScoring` runs the processors on the
collector's event loop; `scoring_workers.WorkerScoring` runs the same `LocalScoring`
inside worker processes and hands its outcomes back. Either way `LocalScoring` decides
which traces are in the scoring scope, where the processors run, and records each
scored trace in its session. The pipeline only sees `Scored`: what to attach, or why
the trace was left unscored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from spanscore.core.provenance import Provenance
from spanscore.core.quoting import excerpt
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.session import Session, TraceSummary
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.span_rollup import sort_attributes, sort_results
from spanscore.core.telemetry import Readout
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.pipeline.prepared_scores import PreparedScores
from spanscore.pipeline.score_scope import ScoreScope
from spanscore.processors.base import Processor
from spanscore.processors.judge_metrics.base import UsesJudges
from spanscore.processors.judge_metrics.telemetry import judge_readouts, judge_telemetry

log = logging.getLogger("spanscore.pipeline")


@dataclass
class Scored:
    """The processors' outputs for one trace or session, sorted by kind."""

    results: list[MetricResult] = field(default_factory=list)  # for the anchor (or a session's carrier)
    span_results: list[MetricResult] = field(default_factory=list)  # each on the span it names (sort_spans)
    usages: list[EvaluatorUsage] = field(default_factory=list)
    attributes: list[SpanAttribute] = field(default_factory=list)  # for the anchor (or carrier)
    span_attributes: list[SpanAttribute] = field(default_factory=list)  # each on the span it names (sort_spans)
    findings: list[SpanFinding] = field(default_factory=list)  # each about one span of the trace
    skip_reason: str | None = None  # set when the trace is outside the scoring scope
    cut_off: bool = False  # the shutdown left it unscored: every metric skipped
    # Encoded by the scoring worker that scored it, which also observed its score metrics.
    prepared: PreparedScores | None = None

    def add(self, output) -> None:
        if isinstance(output, EvaluatorUsage):
            self.usages.append(output)
        elif isinstance(output, SpanAttribute):
            self.attributes.append(output)
        elif isinstance(output, SpanFinding):
            self.findings.append(output)
        else:
            self.results.append(output)

    def sort_spans(self, trace: Trace | None) -> None:
        """Span-level results moved to `span_results` and attributes naming a span to
        `span_attributes` (those naming a span of `trace`; a session has none), the roll-up
        of each span-level metric into `results`, its fields into `attributes`
        (core.span_rollup). In place: `trace.results` is this list."""
        on_spans = any(result.span_id is not None for result in self.results)
        if not on_spans and not any(attribute.span_id is not None for attribute in self.attributes):
            return
        span_ids = {span.span_id.hex() for span, _ in trace.spans()} if trace is not None else set()
        anchor_attributes, named = sort_attributes(self.attributes, span_ids)
        self.attributes[:] = anchor_attributes
        self.span_attributes += named
        if not on_spans:
            return
        sorted_results = sort_results(self.results, span_ids)
        self.results[:] = sorted_results.trace
        self.span_results += sorted_results.spans
        self.attributes += sorted_results.rollup_fields

    @classmethod
    def failed(cls, metric_names: tuple[str, ...], exc: BaseException) -> Scored:
        return cls(results=[MetricResult.failure(name, exc) for name in metric_names])

    @classmethod
    def skipped(cls, metric_names: tuple[str, ...], why: str) -> Scored:
        """No result, only `eval.<metric>.skipped` saying why: not scored, not failed."""
        return cls(attributes=skipped_attributes(metric_names, why), cut_off=True)


def skipped_attributes(metric_names: Sequence[str], why: str) -> list[SpanAttribute]:
    """`eval.<metric>.skipped` of each metric, saying why."""
    return [SpanAttribute(result_keys(name).skipped, why) for name in metric_names]


def sequence_attributes(results: Sequence[MetricResult], sequence: int) -> list[SpanAttribute]:
    """`eval.<metric>.sequence` of each result's metric: which scoring of the trace gave it."""
    return [SpanAttribute(result_keys(name).sequence, sequence) for name in dict.fromkeys(r.name for r in results)]


class ScoringProgress:
    """What a batch's scoring has computed so far, for its traces to leave before it ends
    (`max_hold`): each trace's outputs as the processors add them, and the trace metrics
    of the processors not done yet. `LocalScoring` fills it as it goes; the scoring
    workers fill it when asked (`catch_up`), with what each worker reports."""

    def __init__(self, left: Collection[int] = ()) -> None:
        self._scored: dict[int, Scored] = {}  # by id() of the trace
        self._reported: dict[int, tuple[Scored, tuple[str, ...]]] = {}  # by id(): as computed elsewhere
        self.pending: tuple[str, ...] = ()
        # ids of the batch's traces that left before their scoring began: their results all follow.
        self.left = left
        # Brings it up to date, for a scoring that runs elsewhere (it is asked, not told).
        self.catch_up: Callable[[], Awaitable[None]] | None = None

    def track(self, trace: Trace, scored: Scored) -> None:
        self._scored[id(trace)] = scored

    def out_of_scope(self, trace: Trace, skip_reason: str) -> None:
        self._scored[id(trace)] = Scored(skip_reason=skip_reason)

    def reported(self, trace: Trace, so_far: Scored, pending: tuple[str, ...]) -> None:
        """What a scoring elsewhere computed for the trace so far, sorted and sequenced
        already, and its metrics still pending."""
        self._reported[id(trace)] = (so_far, pending)

    def pending_of(self, trace: Trace) -> tuple[str, ...]:
        """The trace metrics still being computed for the trace."""
        reported = self._reported.get(id(trace))
        return self.pending if reported is None else reported[1]

    def so_far(self, trace: Trace) -> Scored | None:
        """A copy of the trace's outputs so far, span-level results sorted and sequenced as
        the whole scoring's will be; its skip reason when it is out of the scope; None when
        its progress is not known."""
        reported = self._reported.get(id(trace))
        if reported is not None:
            return reported[0]
        scored = self._scored.get(id(trace))
        if scored is None or scored.skip_reason is not None:
            return scored
        early = Scored(
            results=list(scored.results),
            attributes=list(scored.attributes),
            usages=list(scored.usages),
            findings=list(scored.findings),
        )
        early.sort_spans(trace)
        early.attributes += sequence_attributes(early.results, trace.sequence)
        return early


def following_results(final: Scored, early: Scored, pending: Sequence[str]) -> Scored:
    """What `final` adds to the `early` outputs a trace left with: the results and
    attributes of the `pending` metrics, and the usage of the calls made since."""
    prefixes = tuple(result_keys(name).prefix for name in pending)
    wanted = frozenset(pending)
    return Scored(
        results=[result for result in final.results if result.name in wanted],
        attributes=[attribute for attribute in final.attributes if attribute.key.startswith(prefixes)],
        usages=final.usages[len(early.usages) :],
    )


NOT_SCORED = "not scored before the pipeline stopped"  # why, unless the one stopping it says more

# The session a trace in the scoring scope is scored in (opened if need be), or None.
SessionOf = Callable[[Trace], "Session | None"]


class Scoring(Protocol):
    """Where the processors run. Called on the collector's event loop; a batch holds at
    most one trace per session, and a session's traces come in the order they were ready."""

    metric_names: tuple[str, ...]
    trace_metric_names: tuple[str, ...]  # those scored per trace
    session_metric_names: tuple[str, ...]  # those scored when a session closes
    tracks_sessions: bool  # a processor reads sessions: they are opened and closed for it
    # `score_batch` keeps a `ScoringProgress` up to date (or its `catch_up` does): traces may leave before it ends
    shows_progress: bool

    def provenance(self) -> dict[str, Provenance]: ...

    def skip_reason(self, trace: Trace) -> str | None:
        """Why `trace` is outside the scoring scope, or None."""
        ...

    async def score_batch(
        self, traces: Sequence[Trace], session_of: SessionOf, progress: ScoringProgress | None = None
    ) -> list[Scored]:
        """One `Scored` per trace, in order; a trace outside the scope has a skip reason.
        `progress`, when given, is kept up to date if this scoring can."""
        ...

    async def score_session(self, session: Session) -> Scored: ...

    def left_unscored(self, trace: Trace, session_of: SessionOf, why: str) -> Scored:
        """For a trace that leaves without its scoring (the shutdown cut it off), decided
        here: a skip reason when it is outside the scope; else every trace metric skipped
        with `why`, and the trace recorded in its session, unscored."""
        ...


def scope_skip_reason(scope: ScoreScope, trace: Trace) -> str | None:
    """Why `trace` is outside the scoring scope, or None."""
    try:
        return scope.skip_reason(trace)
    except Exception:  # a bug deciding must not cost the trace its scores
        log.exception("could not decide whether to score trace %s; scoring it", trace.trace_id_hex)
        return None


def unscored_in_scope(
    skip: str | None, trace: Trace, session_of: SessionOf, metric_names: tuple[str, ...], why: str
) -> Scored:
    """`Scoring.left_unscored`, once the scope is decided (`skip`)."""
    if skip is not None:
        return Scored(skip_reason=skip)
    session = session_of(trace)
    if session is not None:  # its carrier links it, as it links the scored ones
        session.traces.append(TraceSummary.of(trace))
        session.cut_off = True
    return Scored.skipped(metric_names, why)


class LocalScoring:
    """The processors of one pipeline, run in this process."""

    shows_progress = True

    def __init__(self, processors: list[tuple[str, Processor]], scope: ScoreScope):
        self.processors = processors
        self.scope = scope
        self.metric_names = tuple(name for _, p in processors for name in p.metric_names)
        self.trace_metric_names = tuple(name for _, p in processors for name in p.trace_metric_names)
        self.session_metric_names = tuple(name for _, p in processors for name in p.session_metric_names)
        # Sessions cost memory for as long as `session_idle`; keep them only when a
        # processor reads them.
        self.tracks_sessions = any(p.uses_sessions for _, p in processors)

    def provenance(self) -> dict[str, Provenance]:
        return {name: processor.provenance(name) for _, processor in self.processors for name in processor.metric_names}

    def telemetry(self) -> list[Readout]:
        """The judges' metrics, when a processor calls judges."""
        processors = [processor for _, processor in self.processors]
        if not any(isinstance(processor, UsesJudges) for processor in processors):
            return []
        return judge_readouts(lambda: judge_telemetry(processors))

    def skip_reason(self, trace: Trace) -> str | None:
        return scope_skip_reason(self.scope, trace)

    def left_unscored(self, trace: Trace, session_of: SessionOf, why: str) -> Scored:
        return unscored_in_scope(self.skip_reason(trace), trace, session_of, self.trace_metric_names, why)

    async def score_batch(
        self, traces: Sequence[Trace], session_of: SessionOf, progress: ScoringProgress | None = None
    ) -> list[Scored]:
        """The traces in scope, each in its session, through every processor in turn."""
        answers: list[Scored] = []
        items: list[tuple[Trace, Session | None]] = []
        for trace in traces:
            skip = self.skip_reason(trace)
            answers.append(Scored(skip_reason=skip))
            if skip is None:  # settled before a session is opened for it
                items.append((trace, session_of(trace)))
            elif progress is not None:
                progress.out_of_scope(trace, skip)
        scored = iter(await self._run_processors(items, progress) if items else ())
        answers = [answer if answer.skip_reason is not None else next(scored) for answer in answers]
        for trace, session in items:
            if session is not None:
                session.traces.append(TraceSummary.of(trace))
        return answers

    async def _run_processors(
        self, items: Sequence[tuple[Trace, Session | None]], progress: ScoringProgress | None = None
    ) -> list[Scored]:
        scored = [Scored() for _ in items]
        for (trace, _), one in zip(items, scored):
            trace.results = one.results  # grows as each processor adds: a later one reads the earlier ones'
            if progress is not None:
                progress.track(trace, one)
        for position, (processor_id, processor) in enumerate(self.processors):
            if progress is not None:
                progress.pending = tuple(name for _, p in self.processors[position:] for name in p.trace_metric_names)
            try:
                outputs = await processor.process_batch(items)
                if len(outputs) != len(items):
                    raise RuntimeError(f"process_batch returned {len(outputs)} outputs for {len(items)} traces")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("processor %s failed on a batch of %d traces: %s", processor_id, len(items), exc)
                for one in scored:
                    one.results.extend(MetricResult.failure(name, exc) for name in processor.metric_names)
                continue
            for one, (trace, _), output in zip(scored, items, outputs):
                if isinstance(output, BaseException):
                    log.warning("processor %s failed on trace %s: %s", processor_id, trace.trace_id_hex, output)
                    one.results.extend(MetricResult.failure(name, output) for name in processor.metric_names)
                else:
                    for item in output:
                        one.add(item)
        for (trace, _), one in zip(items, scored):
            one.sort_spans(trace)
            one.attributes += sequence_attributes(one.results, trace.sequence)
        return scored

    async def score_session(self, session: Session) -> Scored:
        scored = Scored()
        for processor_id, processor in self.processors:
            try:
                for output in await processor.process_session(session):
                    scored.add(output)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("processor %s failed on session %s: %s", processor_id, excerpt(session.session_id), exc)
                scored.results.extend(MetricResult.failure(name, exc) for name in processor.metric_names)
        scored.sort_spans(None)  # a session's carrier is its only span: a result naming another is an error
        scored.attributes += sequence_attributes(scored.results, session.sequence)
        return scored
