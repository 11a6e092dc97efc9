"""`embedding_metrics` processor: coherence and loop_detection, no LLM needed.

Per trace, the normalized input and output are embedded once (one call for both) and
shared by the two metrics. Loop detection keeps, per session, the vector and word set
of the last `window` outputs, so earlier traces are never embedded again. A trace
without a session gets no loop_detection result: there is nothing to compare it with.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from pydantic import Field

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.session import Session
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import agent_summary_of
from spanscore.processors.base import Processor
from spanscore.processors.embedders.config import AutoEmbedderConfig, EmbedderConfig, build_embedder
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
            name for name, settings in ((COHERENCE, config.coherence), (LOOP_DETECTION, config.loop_detection))
            if settings.enabled
        )
        self.embedder = None
        self._warm_up: asyncio.Task | None = None

    @property
    def uses_sessions(self) -> bool:
        return self.config.loop_detection.enabled

    async def start(self) -> None:
        self.embedder = build_embedder(self.config.embedder)
        # Loading a model takes seconds: start it now, in the background, so receivers
        # open at once and the first traces wait only for what is left of the load.
        self._warm_up = asyncio.create_task(self._warm_up_embedder())

    async def _warm_up_embedder(self) -> None:
        try:
            await self.embedder.warm_up()
        except Exception as exc:  # the first embed will raise it again, per trace, as an error result
            log.error("embedder %s failed to load: %s", self.embedder.name, exc)

    def provenance(self, metric_name: str) -> Provenance:
        name = self.embedder.name if self.embedder is not None else "none"
        settings = self.config.coherence if metric_name == COHERENCE else self.config.loop_detection
        return Provenance(name, revision_of(metric_name, name, settings.model_dump()))

    async def shutdown(self, deadline: float) -> None:
        if self._warm_up is not None:
            self._warm_up.cancel()
        embedder, self.embedder = self.embedder, None
        if embedder is not None:
            await embedder.close()

    async def process_trace(self, trace: Trace, session: Session | None) -> list[MetricResult]:
        agent = agent_summary_of(trace)
        user_input, output = agent.user_input, agent.final_output
        coherence_on = self.config.coherence.enabled
        loop_on = self.config.loop_detection.enabled and session is not None
        if not (coherence_on or loop_on):
            return []
        input_vector, output_vector = await self.embedder.embed([user_input, output])
        results = []
        if coherence_on:
            results.append(coherence_from_vectors(user_input, output, input_vector, output_vector,
                                                  threshold=self.config.coherence.threshold))
        if loop_on:
            settings = self.config.loop_detection
            previous: deque[PreviousOutput] = session.state.setdefault(self.id, deque(maxlen=settings.window))
            tokens = word_set(output)
            results.append(loop_detection_from_vectors(tokens, output_vector, previous,
                                                       window=settings.window, threshold=settings.threshold))
            previous.append(PreviousOutput(trace_index=len(session.traces), vector=output_vector, tokens=tokens))
        return results


FACTORY = ComponentFactory("processor", "embedding_metrics", EmbeddingMetricsConfig, EmbeddingMetrics)
