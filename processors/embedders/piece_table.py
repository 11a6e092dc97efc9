"""Token ids of chunks of text, kept, and gathered for many chunks in one numpy call.

A tokenizer that splits text at whitespace gives each chunk ("morning;") the same ids
wherever it occurs, so the static embedder keeps them per chunk. Kept as one tuple per
chunk, a batch's ids would be chained in Python, one object per id; here each chunk is a
row, its ids a run of one int32 array, and a batch's ids are one numpy gather.

Size: at most `max_chunks` rows and `max_chars` characters of chunks are kept past a call
(a call that leaves more starts the table over). Beyond the chunk strings, 200,000 chunks
of two ids take about 18 MB, most of it the dict (as a dict of tuples: 25 MB). Not
thread-safe: callers hold a lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

INITIAL_ROWS = 4096


class PieceTable:
    def __init__(self, max_chunks: int, max_chars: int):
        self.max_chunks, self.max_chars = max_chunks, max_chars
        self._rows: dict[str, int] = {}
        self._chars = 0
        self._ids = np.zeros(4 * INITIAL_ROWS, dtype=np.int32)
        self._bounds = np.zeros(INITIAL_ROWS + 1, dtype=np.int64)  # row r's ids: _ids[_bounds[r] : _bounds[r + 1]]

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        self._rows.clear()
        self._chars = 0

    def ids(
        self, chunks: Sequence[str], pieces: Callable[[list[str]], Sequence[Sequence[int]]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ids of `chunks`, concatenated in order, and how many each has. `pieces` gives
        the ids of the chunks not kept yet: called once, with each of them once."""
        rows = self._rows
        found = np.fromiter(map(rows.get, chunks, itertools.repeat(-1)), dtype=np.int64, count=len(chunks))
        unseen = found < 0
        if unseen.any():
            missing = list(itertools.compress(chunks, unseen.tolist()))
            new = list(dict.fromkeys(missing))
            for chunk, ids in zip(new, pieces(new), strict=True):
                rows[chunk] = self._append(ids)
                self._chars += len(chunk)
            found[unseen] = np.fromiter(map(rows.__getitem__, missing), dtype=np.int64, count=len(missing))
        starts = self._bounds[found]
        counts = self._bounds[found + 1] - starts
        gathered = self._ids[runs(starts, counts)]
        if len(rows) > self.max_chunks or self._chars > self.max_chars:
            self.clear()
        return gathered, counts

    def _append(self, ids: Sequence[int]) -> int:
        row = len(self._rows)
        start = int(self._bounds[row])
        end = start + len(ids)
        if end > len(self._ids):
            self._ids = np.concatenate([self._ids, np.zeros(max(end, len(self._ids)), dtype=np.int32)])
        if row + 2 > len(self._bounds):
            self._bounds = np.concatenate([self._bounds, np.zeros(len(self._bounds), dtype=np.int64)])
        self._ids[start:end] = ids
        self._bounds[row + 1] = end
        return row


def runs(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions of the runs `starts[i]`, ..., `starts[i] + counts[i] - 1`, one after another."""
    total = int(counts.sum())
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)


__all__ = ["PieceTable", "runs"]
