"""Running the processors on a batch of traces or one closing session, wherever they live.

`LocalScoring` runs them on the collector's event loop; `scoring_workers.WorkerScoring`
runs the same `LocalScoring` inside worker processes and hands its outcomes back. The
pipeline only sees `Scored`: what to attach, or why the trace was left unscored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from spanscore.collector.score_scope import ScoreScope
from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.base import Processor

log = logging.getLogger("spanscore.pipeline")


@dataclass
class Scored:
    """The processors' outputs for one trace or session, sorted by kind."""

    results: list[MetricResult] = field(default_factory=list)
    usages: list[EvaluatorUsage] = field(default_factory=list)
    attributes: list[SpanAttribute] = field(default_factory=list)
    skip_reason: str | None = None  # set when the trace is outside the scoring scope

    def add(self, output) -> None:
        if isinstance(output, EvaluatorUsage):
            self.usages.append(output)
        elif isinstance(output, SpanAttribute):
            self.attributes.append(output)
        else:
            self.results.append(output)

    @classmethod
    def failed(cls, metric_names: tuple[str, ...], exc: BaseException) -> Scored:
        return cls(results=[MetricResult.failure(name, exc) for name in metric_names])


class LocalScoring:
    """The processors of one pipeline, run in this process."""

    def __init__(self, processors: list[tuple[str, Processor]], scope: ScoreScope):
        self.processors = processors
        self.scope = scope
        self.metric_names = tuple(name for _, p in processors for name in p.metric_names)
        # Sessions cost memory for as long as `session_idle`; keep them only when a
        # processor reads them.
        self.tracks_sessions = any(p.uses_sessions for _, p in processors)

    def provenance(self) -> dict[str, Provenance]:
        return {name: processor.provenance(name) for _, processor in self.processors for name in processor.metric_names}

    def skip_reason(self, trace: Trace) -> str | None:
        try:
            return self.scope.skip_reason(trace)
        except Exception:  # a bug deciding must not cost the trace its scores
            log.exception("could not decide whether to score trace %s; scoring it", trace.trace_id_hex)
            return None

    async def score_batch(self, items: Sequence[tuple[Trace, Session | None]]) -> list[Scored]:
        """Every processor over the batch (at most one trace per session), in turn."""
        scored = [Scored() for _ in items]
        for processor_id, processor in self.processors:
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
                log.warning("processor %s failed on session %s: %s", processor_id, session.session_id, exc)
                scored.results.extend(MetricResult.failure(name, exc) for name in processor.metric_names)
        return scored
