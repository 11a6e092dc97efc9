"""Static token embeddings distilled from all-MiniLM-L6-v2: semantic, offline, no torch.

The base install's default embedder. Every WordPiece token of MiniLM's vocabulary has one
row (128 dimensions, float16, 7 MB, shipped in `static_minilm/`; float32 in memory, 16 MB),
made from the full model's output for that token by `scripts/distill_static_embedder.py`
(principal components with the top 4 dropped, frequency weights applied). A text is
embedded by encoding it with MiniLM's own tokenizer (lowercasing, no special tokens, at
most 254 pieces as the model reads; ASCII text by the same WordPiece in Python,
`wordpiece`, other text by `tokenizers`) and summing its tokens' rows in numpy, then
scaling to unit length. No context between words, so it ranks similarity close to
MiniLM but not equal: on the 421 agent-like text pairs of
`tests/fixtures/embedder_pairs.jsonl`, Spearman 0.90 between its cosines and MiniLM's
(`bench/embedder_quality.py`), at about 48,700 60-word texts/s in batches on one core
here (`bench/embedders.py`; MiniLM: ~65). Its cosines of related texts run lower than
MiniLM's (a question and its answer: 0.68 on average against 0.74), so thresholds tuned
on MiniLM may need lowering.

Threading: the table is read-only and the tokenizers are guarded by a lock, so any
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
from spanscore.processors.embedders.wordpiece import AsciiWordPiece

TABLE_DIR = Path(__file__).with_name("static_minilm")
TABLE_FILE = "static_minilm.npz"
TOKENIZER_FILE = "tokenizer.json"
NAME_VERSION = 1  # bump when the table is remade: the name keys caches
# Fewer texts than this are embedded on the caller's thread: at ~20 us for a long text
# that is milliseconds, less than a hop to a worker thread costs the loop in a busy
# collector (and tokenizing in Python, the thread would not run alongside it anyway).
INLINE_TEXTS = 1024


class StaticEmbedder(Embedder):
    def __init__(self, directory: Path = TABLE_DIR):
        from tokenizers import Tokenizer

        try:
            with np.load(directory / TABLE_FILE, allow_pickle=False) as data:
                # Stored as float16 [vocab, dims] with the weights applied; summed as
                # float32, converted once here rather than per gathered row.
                table = data["embeddings"].astype(np.float32)
                self.meta = json.loads(str(data["meta"]))  # how the table was made
            self._tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
            self._ascii = AsciiWordPiece(directory / TOKENIZER_FILE)
        except (OSError, KeyError, ValueError) as exc:
            raise RuntimeError(f"static embedder: cannot load its table from {directory}: {exc}") from None
        # Padding when pooling needs a zero row: [PAD]'s (all special rows are zero).
        zero_rows = np.flatnonzero(~table.any(axis=1))
        if not zero_rows.size:
            table = np.vstack([table, np.zeros((1, table.shape[1]), dtype=np.float32)])
            zero_rows = np.array([table.shape[0] - 1])
        self.table, self._zero_row = table, int(zero_rows[0])
        self.max_tokens = int(self.meta.get("max_content_tokens", 254))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(self.max_tokens)
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
        with self._lock:
            ids = self._token_ids(texts)
        sums = _pooled(self.table, ids, self._zero_row)
        # Rows of [UNK] and special tokens are zero: text of only those has no direction.
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        np.divide(sums, norms, out=out, where=norms > 0)
        return out

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, cut at the model's length; ASCII text is tokenized in
        Python (the same ids, faster), the rest by the library in one call."""
        ids: list[list[int]] = []
        others: list[int] = []
        for i, text in enumerate(texts):
            if text.isascii():
                ids.append(self._ascii.ids(text)[: self.max_tokens])
            else:
                ids.append([])
                others.append(i)
        if others:
            encodings = self._tokenizer.encode_batch([texts[i] for i in others], add_special_tokens=False)
            for i, encoding in zip(others, encodings):
                ids[i] = encoding.ids
        return ids


POOL_GROUP = 64  # texts pooled per numpy call: a group's rows are padded to its longest


def _pooled(table: np.ndarray, ids: list[list[int]], zero_row: int) -> np.ndarray:
    """Per text, the sum of its tokens' rows.

    Texts are taken in order of length, a group at a time, padded with a row of zeros to
    the group's longest, so that numpy sums a dense [texts, tokens, dims] block: several
    times faster than a segmented sum over the concatenated rows.
    """
    sums = np.zeros((len(ids), table.shape[1]), dtype=np.float32)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    order = np.argsort(lengths, kind="stable")
    order = order[lengths[order] > 0]
    for start in range(0, len(order), POOL_GROUP):
        group = order[start : start + POOL_GROUP]
        group_lengths = lengths[group]
        width = int(group_lengths[-1])
        padded = np.full((len(group), width), zero_row, dtype=np.int64)
        padded[np.arange(width) < group_lengths[:, None]] = np.fromiter(
            (token for i in group for token in ids[i]), dtype=np.int64, count=int(group_lengths.sum())
        )
        sums[group] = table[padded].sum(axis=1)
    return sums
