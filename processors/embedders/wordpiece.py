"""MiniLM's WordPiece tokenization of ASCII text, in Python, with a word cache.

The static embedder only needs token ids, and for ASCII text the BERT pipeline that
`tokenizers` runs reduces to a few steps that Python does faster than a call into the
library costs (~20 us per text there, ~3 us here with warm words):
- BertNormalizer (clean_text, lowercase): drop control characters (tab, newline and
  carriage return are whitespace, every other C0 control and DEL is dropped), lowercase;
- BertPreTokenizer: split on whitespace, and every punctuation character is a word of
  its own (in ASCII that is every printable character that is not a letter, a digit or
  a space);
- WordPiece per word: greedy longest match first from the vocabulary, continuation
  pieces prefixed `##`; a word longer than `max_input_chars_per_word`, or with a part no
  piece matches, is the single unknown token.
What a whitespace-separated chunk ("morning;") yields depends on the chunk alone, so
its ids are kept per chunk (`piece_table`; the table starts over when full) and most
chunks cost one dict lookup. A chunk with any non-ASCII character goes to the library (the static
embedder cuts such text at ASCII whitespace), which handles the Unicode rules (accents,
CJK, Unicode punctuation and whitespace) this does not.
`tests/processors/embedders/test_wordpiece.py` checks the two agree, on random text too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from spanscore.processors.embedders.piece_table import PieceTable

# Characters BertNormalizer's clean_text drops: C0 controls and DEL, except the three
# it reads as whitespace.
_DROPPED = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_WORDS = re.compile(r"[a-z0-9]+|[!-/:-@\[-`{-~]")
MAX_CACHED_CHUNKS = 200_000
MAX_CACHED_CHARS = 2_000_000  # of those chunks: prose's average 6 or so, a long one (a URL, a blob) counts whole


class AsciiWordPiece:
    """Token ids of ASCII text exactly as the tokenizer in `tokenizer.json` gives them
    (no special tokens, no truncation). Not thread-safe: callers hold a lock."""

    def __init__(self, tokenizer_file: Path):
        spec = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
        model = spec["model"]
        normalizer, pre_tokenizer = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
        if (
            model.get("type") != "WordPiece"
            or normalizer.get("type") != "BertNormalizer"
            or not normalizer.get("lowercase")
            or not normalizer.get("clean_text")
            or pre_tokenizer.get("type") != "BertPreTokenizer"
        ):
            raise ValueError(f"{tokenizer_file}: not a lowercasing BERT WordPiece tokenizer")
        self.vocab: dict[str, int] = model["vocab"]
        self.unknown = self.vocab[model["unk_token"]]
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_word_chars = int(model.get("max_input_chars_per_word", 100))
        self._chunks = PieceTable(MAX_CACHED_CHUNKS, MAX_CACHED_CHARS)

    def ids(self, text: str) -> list[int]:
        """Token ids of `text`, which must be ASCII."""
        return self.chunk_ids(self.chunks(text))[0].tolist()

    @staticmethod
    def chunks(text: str) -> list[str]:
        """The whitespace-separated chunks of the ASCII `text`, controls dropped, lowercased."""
        # After the controls are dropped, str.split's whitespace is BERT's (ASCII only).
        return text.encode("ascii").translate(None, _DROPPED).decode("ascii").lower().split()

    def chunk_ids(self, chunks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of `chunks` (as `chunks()` gives them, of any number of texts: one lookup
        for them all), concatenated, and how many each has."""
        return self._chunks.ids(chunks, self._chunk_pieces)

    def _chunk_pieces(self, chunks: list[str]) -> list[tuple[int, ...]]:
        return [tuple(i for word in _WORDS.findall(chunk) for i in self._pieces(word)) for chunk in chunks]

    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > self.max_word_chars:
            return (self.unknown,)
        vocab, prefix = self.vocab, self.prefix
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else prefix + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    pieces.append(found)
                    break
                end -= 1
            else:  # no piece matches what is left: the whole word is unknown
                return (self.unknown,)
            start = end
        return tuple(pieces)
