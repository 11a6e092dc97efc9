"""Static token embeddings distilled from all-MiniLM-L6-v2: semantic, offline, no torch.

The base install's default embedder. Every WordPiece token of MiniLM's vocabulary has one
row (128 dimensions, float16, 7 MB, shipped in `static_minilm/`; float32 in memory, 16 MB),
made from the full model's output for that token by `scripts/distill_static_embedder.py`
(principal components with the top 4 dropped, frequency weights applied). A text is
embedded by encoding it with MiniLM's own tokenizer (lowercasing, no special tokens, at
most 254 pieces as the model reads; ASCII words by the same WordPiece in Python,
`wordpiece`, words with other characters by `tokenizers`) and summing its tokens' rows in numpy, then
scaling to unit length. No context between words, so it ranks similarity close to
MiniLM but not equal: on the 421 agent-like text pairs of
`tests/fixtures/embedder_pairs.jsonl`, Spearman 0.90 between its cosines and MiniLM's
(`bench/embedder_quality.py`), at about 84,000 60-word texts/s in batches of 64 on one
core here, 30,000 in calls of two texts (`bench/embedders.py`; MiniLM: ~65). Its cosines
of related texts run lower than MiniLM's (a question and its answer: 0.68 on average
against 0.74), so thresholds tuned on MiniLM may need lowering.

Threading: the table is read-only and the tokenizers are guarded by a lock, so any
thread may call `embed_sync`; `embed` runs large inputs in a worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.embedders.piece_table import PieceTable, runs
from spanscore.processors.embedders.wordpiece import AsciiWordPiece

TABLE_DIR = Path(__file__).with_name("static_minilm")
TABLE_FILE = "static_minilm.npz"
TOKENIZER_FILE = "tokenizer.json"
NAME_VERSION = 1  # bump when the table is remade: the name keys caches
# Fewer texts than this are embedded on the caller's thread: at ~20 us for a long text
# that is milliseconds, less than a hop to a worker thread costs the loop in a busy
# collector (and tokenizing in Python, the thread would not run alongside it anyway).
INLINE_TEXTS = 1024
# BERT's whitespace in ASCII (its other controls it drops, which joins what they separate).
_ASCII_WHITESPACE = re.compile(r"[ \t\n\r]+")
MAX_CACHED_CHUNKS = 50_000  # non-ASCII chunks whose ids are kept (`piece_table`); the table starts over when full
MAX_CACHED_CHARS = 500_000  # characters of those chunks, at most


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
        self._unicode_chunks = PieceTable(MAX_CACHED_CHUNKS, MAX_CACHED_CHARS)
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
            ids, starts, lengths = self._token_ids_of(texts)
        sums = _pooled(self.table, ids, starts, np.minimum(lengths, self.max_tokens), self._zero_row)
        # Rows of [UNK] and special tokens are zero: text of only those has no direction.
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        np.divide(sums, norms, out=out, where=norms > 0)
        return out

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, cut at the model's length: what `embed_sync` sums."""
        with self._lock:
            ids, starts, lengths = self._token_ids_of(texts)
        cut = np.minimum(lengths, self.max_tokens)
        return [ids[start : start + length].tolist() for start, length in zip(starts.tolist(), cut.tolist())]

    def _token_ids_of(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The token ids of all texts in one array, where each text's start, and how many
        it has (not yet cut at the model's length).

        ASCII text is tokenized in Python (the same ids, faster), the chunks of all texts
        looked up at once. Other text is cut at ASCII whitespace, which BERT's tokenizer
        always splits at and never keeps: its ASCII chunks go the Python way, the others
        to the library, in one call for the chunks of all texts not seen before (kept, as
        `wordpiece` keeps ASCII chunks: a document's few accented words or dashes no
        longer send all its text through the library)."""
        chunks: list[str] = []  # every text's ASCII chunks, in order
        unicode_chunks: list[str] = []  # and the others
        unicode_at: list[int] = []  # where those are among all chunks
        per_text: list[int] = []
        split_ascii = self._ascii.chunks
        for text in texts:
            before = len(chunks) + len(unicode_chunks)
            if text.isascii():
                chunks += split_ascii(text)
            else:
                for ascii_run, run in itertools.groupby(_ASCII_WHITESPACE.split(text), key=str.isascii):
                    if ascii_run:  # the same chunks as each alone, in one call
                        chunks += split_ascii(" ".join(run))
                        continue
                    for chunk in run:
                        unicode_at.append(len(chunks) + len(unicode_chunks))
                        unicode_chunks.append(chunk)
            per_text.append(len(chunks) + len(unicode_chunks) - before)
        if not unicode_chunks:
            ids, counts = self._ascii.chunk_ids(chunks)
        else:
            is_unicode = np.zeros(len(chunks) + len(unicode_chunks), dtype=bool)
            is_unicode[unicode_at] = True
            ascii_ids, ascii_counts = self._ascii.chunk_ids(chunks)
            unicode_ids, unicode_counts = self._unicode_chunks.ids(unicode_chunks, self._encode)
            counts = np.zeros(len(is_unicode), dtype=np.int64)
            counts[~is_unicode], counts[is_unicode] = ascii_counts, unicode_counts
            chunk_starts = np.cumsum(counts) - counts
            ids = np.zeros(int(counts.sum()), dtype=np.int32)
            ids[runs(chunk_starts[~is_unicode], ascii_counts)] = ascii_ids
            ids[runs(chunk_starts[is_unicode], unicode_counts)] = unicode_ids
        bounds = np.concatenate(([0], np.cumsum(counts)))  # where each chunk's ids start
        text_chunks = np.concatenate(([0], np.cumsum(np.asarray(per_text, dtype=np.int64))))
        starts = bounds[text_chunks[:-1]]
        return ids, starts, bounds[text_chunks[1:]] - starts

    def _encode(self, chunks: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch(chunks, add_special_tokens=False)]


POOL_GROUP = 64  # texts pooled per numpy call at most: a group's rows are padded to its longest
# A group ends before the text that would make its padded block this many times its tokens:
# claims and passages of a few tokens beside a long one waste less than another call costs.
MAX_PADDING = 1.5


def _pooled(table: np.ndarray, ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray, zero_row: int) -> np.ndarray:
    """Per text, the sum of the rows of its `lengths[i]` tokens from `ids[starts[i]]` on.

    Texts are taken in order of length, a group at a time, padded with a row of zeros to
    the group's longest, so that numpy sums a dense [texts, tokens, dims] block: faster
    than a segmented sum over the concatenated rows (`np.add.reduceat` over one batch's
    gathered rows measured 1.8 times slower on 51 LLM spans' texts, 1.4 on one span's,
    stretches of any size; gathering the rows alone takes most of this). Each text's rows are
    added in its tokens' order and the zero rows last, so each sum is the same whatever
    the batch and its groups.
    """
    sums = np.zeros((len(starts), table.shape[1]), dtype=np.float32)
    order = np.argsort(lengths, kind="stable")
    order = order[lengths[order] > 0]
    for group in _groups(lengths[order].tolist()):
        group = order[group]
        group_lengths = lengths[group]
        width = int(group_lengths[-1])
        columns = np.arange(width)
        tokens = ids.take(starts[group][:, None] + columns, mode="clip")
        sums[group] = table[np.where(columns < group_lengths[:, None], tokens, zero_row)].sum(axis=1)
    return sums


def _groups(lengths: list[int]) -> list[slice]:
    """Slices of the ascending `lengths`: at most `POOL_GROUP` long, each padded to its last
    length within `MAX_PADDING` times its total (a group of one always is)."""
    groups, start, total = [], 0, 0
    for at, length in enumerate(lengths):
        count = at - start
        if count and (count == POOL_GROUP or length * (count + 1) > MAX_PADDING * (total + length)):
            groups.append(slice(start, at))
            start, total = at, 0
        total += length
    if start < len(lengths):
        groups.append(slice(start, len(lengths)))
    return groups
