"""The static embedder's table of chunks' token ids: what it gathers, what it asks for, its bound."""

from __future__ import annotations

import numpy as np

from spanscore.processors.embedders.piece_table import INITIAL_ROWS, PieceTable, runs


class Pieces:
    """Made-up ids: a chunk's are its characters' code points; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def __call__(self, chunks: list[str]) -> list[tuple[int, ...]]:
        self.asked.append(chunks)
        return [tuple(map(ord, chunk)) for chunk in chunks]


def test_ids_of_chunks_in_order_each_unseen_chunk_asked_for_once():
    table, pieces = PieceTable(100, 1_000), Pieces()
    ids, counts = table.ids(["ab", "", "c", "ab"], pieces)
    assert ids.tolist() == [97, 98, 99, 97, 98] and counts.tolist() == [2, 0, 1, 2]
    assert pieces.asked == [["ab", "", "c"]]
    ids, counts = table.ids(["c", "de", "ab"], pieces)
    assert ids.tolist() == [99, 100, 101, 97, 98] and counts.tolist() == [1, 2, 2]
    assert pieces.asked[1:] == [["de"]] and len(table) == 4
    ids, counts = table.ids([], pieces)
    assert ids.tolist() == [] and counts.tolist() == [] and len(pieces.asked) == 2


def test_it_grows_past_its_first_arrays():
    table, pieces = PieceTable(10 * INITIAL_ROWS, 10**6), Pieces()
    chunks = [f"chunk{i}" * (1 + i % 3) for i in range(2 * INITIAL_ROWS)]
    ids, counts = table.ids(chunks, pieces)
    assert counts.tolist() == [len(chunk) for chunk in chunks]
    assert ids.tolist() == [ord(c) for chunk in chunks for c in chunk]
    assert table.ids(chunks[::-1], pieces)[0].tolist() == [ord(c) for chunk in chunks[::-1] for c in chunk]
    assert len(pieces.asked) == 1


def test_a_call_that_leaves_it_over_its_bound_starts_it_over():
    table, pieces = PieceTable(3, 1_000), Pieces()
    ids, _ = table.ids(["a", "b", "c", "d"], pieces)  # the answer is whole, then the table empties
    assert ids.tolist() == [97, 98, 99, 100] and len(table) == 0
    table.ids(["a", "b"], pieces)
    assert len(table) == 2
    assert table.ids(["x", "a"], pieces)[0].tolist() == [120, 97] and len(table) == 3
    assert pieces.asked[-1] == ["x"]


def test_runs_are_positions_of_consecutive_stretches():
    assert runs(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert runs(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_a_call_that_leaves_it_over_its_characters_starts_it_over():
    table, pieces = PieceTable(100, 10), Pieces()
    table.ids(["abcd", "efg"], pieces)
    assert len(table) == 2
    ids, counts = table.ids(["hijk", "abcd"], pieces)  # 11 characters kept: the answer is whole, then it empties
    assert counts.tolist() == [4, 4] and ids.tolist()[:4] == [104, 105, 106, 107] and len(table) == 0
