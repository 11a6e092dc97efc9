"""`embedding_metrics` processor: coherence and loop_detection, no LLM needed.

Per trace, the input and output (from the agent summary) are embedded once and shared
by the two metrics; a batch of traces has all its texts embedded in one call. Loop
detection keeps, per session, the vector and word set of the last `window` outputs, so
earlier traces are never embedded again. A trace without a session gets no
loop_detection result: there is nothing to compare it with.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

from pydantic import Field

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import agent_summary_of
from spanscore.processors.base import Processor, TraceOutput
from spanscore.processors.embedders.config import AutoEmbedderConfig, EmbedderConfig
from spanscore.processors.embedders.held import HeldEmbedder
from spanscore.processors.metrics import PreviousOutput, coherence_from_vectors, loop_detection_from_vectors, word_set
from spanscore.processors.metrics.coherence import NAME as COHERENCE
from spanscore.processors.metrics.loop_detection import DEFAULT_WINDOW
from spanscore.processors.metrics.loop_detection import NAME as LOOP_DETECTION

log = logging.getLogger("spanscore.embedding_metrics")


class MetricSettings(ComponentConfig):
    enabled: bool = True
    threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)


class LoopDetectionSettings(MetricSettings):
    window: int = Field(default=DEFAULT_WINDOW, ge=1, le=100)


class EmbeddingMetricsConfig(ComponentConfig):
    embedder: EmbedderConfig = Field(default_factory=AutoEmbedderConfig)
    coherence: MetricSettings = Field(default_factory=MetricSettings)
    loop_detection: LoopDetectionSettings = Field(default_factory=LoopDetectionSettings)


class EmbeddingMetrics(Processor):
    def __init__(self, component_id: str, config: EmbeddingMetricsConfig):
        self.id = component_id
        self.config = config
        self.metric_names = tuple(
            name
            for name, settings in ((COHERENCE, config.coherence), (LOOP_DETECTION, config.loop_detection))
            if settings.enabled
        )
        self.held = HeldEmbedder()

    @property
    def uses_sessions(self) -> bool:
        return self.config.loop_detection.enabled

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        self.held.start(self.config.embedder)

    def provenance(self, metric_name: str) -> Provenance:
        name = self.held.name
        settings = self.config.coherence if metric_name == COHERENCE else self.config.loop_detection
        return Provenance(name, revision_of(metric_name, name, settings.model_dump()))

    async def shutdown(self, deadline: float) -> None:
        await self.held.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[TraceOutput]:
        [outputs] = await self.process_batch([(trace, session)])
        if isinstance(outputs, BaseException):
            raise outputs
        return outputs

    async def process_batch(
        self,
        items: Sequence[tuple[Trace, Session | None]],
    ) -> list[Sequence[TraceOutput] | BaseException]:
        """The batch's inputs and outputs embedded in one call, then each trace scored."""
        coherence_on = self.config.coherence.enabled
        loop_on = self.config.loop_detection.enabled
        wanted = [coherence_on or (loop_on and session is not None) for _, session in items]
        summaries = [agent_summary_of(trace) if want else None for (trace, _), want in zip(items, wanted)]
        texts = [
            text for summary in summaries if summary is not None for text in (summary.user_input, summary.final_output)
        ]
        try:
            vectors = await self.held.started(self.id).embed(texts) if texts else None
        except Exception as exc:  # each trace fails as it would have alone
            return [exc if want else [] for want in wanted]
        outputs: list[Sequence[TraceOutput] | BaseException] = []
        row = 0
        for (_, session), summary in zip(items, summaries):
            if summary is None or vectors is None:  # vectors are there when a summary is
                outputs.append([])
                continue
            try:
                outputs.append(
                    self._score(
                        summary.user_input,
                        summary.final_output,
                        vectors[row],
                        vectors[row + 1],
                        session if loop_on else None,
                    )
                )
            except Exception as exc:
                outputs.append(exc)
            row += 2
        return outputs

    def _score(
        self, user_input: str, output: str, input_vector, output_vector, session: Session | None
    ) -> list[MetricResult]:
        results = []
        if self.config.coherence.enabled:
            results.append(
                coherence_from_vectors(
                    user_input, output, input_vector, output_vector, threshold=self.config.coherence.threshold
                )
            )
        if session is not None:
            settings = self.config.loop_detection
            previous: deque[PreviousOutput] = session.state.setdefault(self.id, deque(maxlen=settings.window))
            tokens = word_set(output)
            results.append(
                loop_detection_from_vectors(
                    tokens, output_vector, previous, window=settings.window, threshold=settings.threshold
                )
            )
            previous.append(PreviousOutput(trace_index=len(session.traces), vector=output_vector, tokens=tokens))
        return results


FACTORY = ComponentFactory("processor", "embedding_metrics", EmbeddingMetricsConfig, EmbeddingMetrics)
