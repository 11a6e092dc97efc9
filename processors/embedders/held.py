"""An embedder held by a processor from its start to its shutdown.

Loading a model takes seconds: `start` builds the embedder and loads it in the
background, so receivers open at once and the first traces wait only for what is left
of the load. A load that fails is logged once here; each embed raises it again, and the
processor records it per trace as an error result.
"""

from __future__ import annotations

import asyncio
import logging

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.config import EmbedderConfig, build_embedder

log = logging.getLogger("spanscore.embedders")

NOT_STARTED = "none"  # the evaluator's name before start (a processor's provenance asked early)


class HeldEmbedder:
    def __init__(self) -> None:
        self.embedder: Embedder | None = None
        self._warm_up: asyncio.Task | None = None

    def start(self, config: EmbedderConfig) -> Embedder:
        embedder = self.embedder = build_embedder(config)
        self._warm_up = asyncio.create_task(_warm_up(embedder))
        return embedder

    async def loaded(self) -> None:
        """Returns once the background load has ended, loaded or failed (benches wait for it)."""
        if self._warm_up is not None:
            await asyncio.shield(self._warm_up)

    @property
    def name(self) -> str:
        return self.embedder.name if self.embedder is not None else NOT_STARTED

    def started(self, owner: str) -> Embedder:
        if self.embedder is None:
            raise RuntimeError(f"{owner} embeds between its start and its shutdown")
        return self.embedder

    async def close(self) -> None:
        if self._warm_up is not None:
            self._warm_up.cancel()
        embedder, self.embedder = self.embedder, None
        if embedder is not None:
            await embedder.close()


async def _warm_up(embedder: Embedder) -> None:
    try:
        await embedder.warm_up()
    except Exception as exc:  # the first embed raises it again, per trace, as an error result
        log.error("embedder %s failed to load: %s", embedder.name, exc)
