"""Static token embeddings distilled from all-MiniLM-L6-v2: semantic, offline, no torch.

The base install's default embedder. Every WordPiece token of MiniLM's vocabulary has one
row (128 dimensions, float16, 7 MB, shipped in `static_minilm/`), made from the full
model's output for that token by `scripts/distill_static_embedder.py` (principal
components with the top 4 dropped, frequency weights applied). A text is embedded by
encoding it with MiniLM's own fast tokenizer (`tokenizers`, lowercasing, no special
tokens, at most 254 pieces as the model reads) and summing its tokens' rows in numpy,
then scaling to unit length. No context between words, so it ranks similarity close to
MiniLM but not equal: on the 421 agent-like text pairs of
`tests/fixtures/embedder_pairs.jsonl`, Spearman 0.90 between its cosines and MiniLM's
(`bench/embedder_quality.py`), at about 10,000 texts/s on one core (MiniLM: ~100).
Its cosines of related texts run lower than MiniLM's (a question and its answer: 0.68
on average against 0.74), so thresholds tuned on MiniLM may need lowering.

Threading: the table is read-only and the tokenizer is guarded by a lock, so any
thread may call `embed_sync`; `embed` runs large inputs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spanscore.processors.embedders.base import Embedder

TABLE_DIR = Path(__file__).with_name("static_minilm")
TABLE_FILE = "static_minilm.npz"
TOKENIZER_FILE = "tokenizer.json"
NAME_VERSION = 1  # bump when the table is remade: the name keys caches
INLINE_TEXTS = 64  # fewer texts than this are embedded on the caller's thread (microseconds)


class StaticEmbedder(Embedder):
    def __init__(self, directory: Path = TABLE_DIR):
        from tokenizers import Tokenizer

        try:
            with np.load(directory / TABLE_FILE, allow_pickle=False) as data:
                self.table = data["embeddings"]  # float16 [vocab, dims], weights applied
                self.meta = json.loads(str(data["meta"]))  # how the table was made
            self._tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        except (OSError, KeyError, ValueError) as exc:
            raise RuntimeError(f"static embedder: cannot load its table from {directory}: {exc}") from None
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(int(self.meta.get("max_content_tokens", 254)))
        self._lock = threading.Lock()
        self.dimension = int(self.table.shape[1])
        self.name = f"static-minilm-v{NAME_VERSION}-d{self.dimension}"

    def __repr__(self) -> str:
        return f"StaticEmbedder(dimension={self.dimension})"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) < INLINE_TEXTS:
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        positions = [i for i, text in enumerate(texts) if text and not text.isspace()]
        if not positions:
            return out
        with self._lock:
            encodings = self._tokenizer.encode_batch([texts[i] for i in positions], add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        ids = np.fromiter((i for e in encodings for i in e.ids), dtype=np.int64, count=int(lengths.sum()))
        sums = np.zeros((len(encodings), self.dimension), dtype=np.float32)
        nonempty = lengths > 0
        if ids.size:
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))[nonempty]
            sums[nonempty] = np.add.reduceat(self.table[ids].astype(np.float32), starts, axis=0)
        # Rows of [UNK] and special tokens are zero: text of only those has no direction.
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        out[positions] = np.divide(sums, norms, out=np.zeros_like(sums), where=norms > 0)
        return out
