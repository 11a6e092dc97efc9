"""A dependency-free lexical embedder: hashed words, word pairs and character n-grams.

This is *lexical*, not semantic. Two texts are close when they share words, word pairs
or word fragments ("retry" / "retries" share "<re", "ret", "etr", ...); paraphrases with
no vocabulary in common ("the car broke down" / "the vehicle failed") are not close, and
negation is invisible. It is the offline default: always available, deterministic, fast,
and good enough to tell an answer about the question from an answer about something else.

Features, each hashed into `dimension` buckets (the "hashing trick"):
  - word unigrams and word bigrams (lower-cased, NFKC-normalized `\\w+` tokens);
  - character n-grams of length 3..5 inside each word, with `<`/`>` marking its ends,
    which gives robustness to inflection and typos.
A word's or word pair's weight is 1 + ln(tf) (sublinear: a word said ten times is not ten
times the evidence); a word's n-grams describe the word, so they take its weight, as in
fastText. Each feature also gets a sign from a hash bit the bucket does not use, so bucket
collisions cancel in expectation instead of always inflating similarity. Each feature
group is L2-normalized on its own before the groups are mixed by `GROUP_WEIGHTS`: a
60-word text has ~900 character n-grams and only ~60 words, and without that the n-grams
would drown the words.

Hashes are blake2b digests (cut to 63 bits) of the feature text, never Python's salted
`hash`, so a text gets the same vector in every process, on every machine, in every
release that keeps `NAME_VERSION`. Bigram hashes are mixed numerically from the two word
hashes.

Why 1024 dimensions by default: with the sign trick, collisions add to the cosine of two
texts a zero-mean noise whose spread shrinks like 1/sqrt(dimension). Measured on pairs of
unrelated 60-word texts, its standard deviation is 0.043 at 512, 0.033 at 1024, 0.024 at
2048 and 0.019 at 4096. 0.03 is below the resolution that scores are read at, while a
row stays 4 KiB (a 10,000-entry cache holds 40 MiB); 4096 would buy 0.014 of noise for
four times the memory and dot-product cost.

Speed: Python only tokenizes and looks words up in a per-process memo of their hashes
and n-gram buckets; counting, signing and bucketing run in numpy over a whole chunk of
texts. On one core, once the memo is warm: ~14,000 60-word texts/s (0.15 ms per trace
of two texts) on agent-like text (`bench/embedders.py`), ~8,000 on text drawn uniformly
from a 5,000-word vocabulary, where fewer words repeat.

Threading: the only state is that memo, a `functools.lru_cache` (thread-safe), so `embed`
and `embed_sync` may run concurrently. `embed` hashes small batches inline (a thread hop
costs about as much) and larger ones in a worker thread.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from hashlib import blake2b

import numpy as np

from spanscore.processors.embedders.base import Embedder

DEFAULT_DIMENSION = 1024
MIN_CHAR_NGRAM = 3
MAX_CHAR_NGRAM = 5
# Word unigrams carry the topic, bigrams some word order, n-grams the morphology.
GROUP_WEIGHTS = {"words": 1.0, "bigrams": 0.5, "chars": 1.0}
_GROUP_WEIGHT_VECTOR = np.array([GROUP_WEIGHTS["words"], GROUP_WEIGHTS["bigrams"], GROUP_WEIGHTS["chars"]])
# Bump when features, hashing or weights change: vectors keyed by the name would differ.
NAME_VERSION = 1
# Below this many characters in a batch, `embed` computes inline: a thread hop costs
# ~50-100 us, about what hashing a couple of short texts costs.
INLINE_CHARS = 2_000
WORD_MEMO_SIZE = 1 << 16
# Texts embedded together: bounds the (texts x 3 x dimension) float64 scratch at ~6 MiB.
CHUNK_TEXTS = 256

_TOKEN = re.compile(r"\w+")
_HASH_BITS = 63  # hashes fit int64, so lists of them convert to arrays at C speed
_SIGN_BIT = np.uint64(_HASH_BITS - 1)
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
# splitmix64 constants: mixing two word hashes into a bigram hash without Python loops.
_MIX_A = np.uint64(0x9E3779B97F4A7C15)
_MIX_B = np.uint64(0xBF58476D1CE4E5B9)
_MIX_C = np.uint64(0x94D049BB133111EB)


def stable_hash(feature: str) -> int:
    """A 63-bit hash of `feature` that is the same in every process (blake2b)."""
    digest = blake2b(feature.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - _HASH_BITS)


def char_ngrams(word: str) -> list[str]:
    """The word's character n-grams, `<`/`>` marking its ends."""
    marked = f"<{word}>"
    grams = [marked[i : i + n] for n in range(MIN_CHAR_NGRAM, MAX_CHAR_NGRAM + 1) for i in range(len(marked) - n + 1)]
    # A one-letter word has no 3-gram inside its markers; its marked form stands in.
    return grams or [marked]


def tokenize(text: str) -> list[str]:
    """The word tokens features are built from: NFKC, lower-cased, `\\w+` runs."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


def _mix(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # wrap-around is the point of the mixer
        z = (left * _MIX_A + (right ^ (right >> np.uint64(29)))) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * _MIX_B) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * _MIX_C) & _MASK64
        return z ^ (z >> np.uint64(31))


@lru_cache(maxsize=WORD_MEMO_SIZE)
def _word_features(word: str, dimension: int) -> tuple[int, np.ndarray, np.ndarray]:
    """(word hash, its n-grams' buckets, their signed counts), n-grams merged per bucket.

    Memoized per process, shared by every instance (the pipeline and the metrics' default
    embedder alike): words repeat, and hashing a word's n-grams is most of the cost.
    """
    hashes = np.array([stable_hash("c:" + g) for g in char_ngrams(word)], dtype=np.int64).view(np.uint64)
    buckets, inverse = np.unique((hashes % np.uint64(dimension)).astype(np.intp), return_inverse=True)
    values = np.bincount(inverse, weights=_signs(hashes), minlength=buckets.size)
    buckets.setflags(write=False)
    values.setflags(write=False)
    return stable_hash("w:" + word), buckets, values


class HashingEmbedder(Embedder):
    """Lexical feature-hashing embedder (see the module docstring). Deterministic."""

    def __init__(self, dimension: int = DEFAULT_DIMENSION):
        if dimension < 2:
            raise ValueError(f"dimension must be at least 2, got {dimension}")
        self.dimension = int(dimension)
        self.name = f"hashing-v{NAME_VERSION}-d{self.dimension}"
        self._dim = np.uint64(self.dimension)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension})"

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if sum(len(t) for t in texts) <= INLINE_CHARS:
            return self.embed_sync(texts)
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(texts), CHUNK_TEXTS):
            chunk = texts[start : start + CHUNK_TEXTS]
            out[start : start + len(chunk)] = self._embed_chunk(chunk)
        return out

    def _embed_chunk(self, texts: Sequence[str]) -> np.ndarray:
        """All texts of a chunk at once: Python only tokenizes and looks words up."""
        n = len(texts)
        token_hashes: list[int] = []  # every token in order, for the bigrams
        token_rows: list[int] = []
        word_hashes: list[int] = []  # distinct words per text
        word_rows: list[int] = []
        word_tfs: list[int] = []
        char_buckets: list[np.ndarray] = []
        char_values: list[np.ndarray] = []
        d = self.dimension
        for row, text in enumerate(texts):
            if not text or text.isspace():
                continue
            tokens = tokenize(text)
            hash_of: dict[str, int] = {}
            for word, tf in Counter(tokens).items():
                word_hash, buckets, values = _word_features(word, d)
                hash_of[word] = word_hash
                word_hashes.append(word_hash)
                word_rows.append(row)
                word_tfs.append(tf)
                char_buckets.append(buckets)
                char_values.append(values)
            token_hashes.extend(map(hash_of.__getitem__, tokens))
            token_rows.extend([row] * len(tokens))
        if not word_hashes:
            return np.zeros((n, self.dimension), dtype=np.float32)

        # A word's n-grams describe the word, so they take its sublinear tf weight.
        word_weights = 1.0 + np.log(np.array(word_tfs, dtype=np.float64))
        rows = np.array(word_rows, dtype=np.intp)
        words = np.array(word_hashes, dtype=np.int64).view(np.uint64)
        sizes = np.fromiter((b.size for b in char_buckets), dtype=np.intp, count=len(char_buckets))
        pairs, pair_rows, pair_weights = _bigram_features(
            np.array(token_hashes, dtype=np.int64).view(np.uint64), np.array(token_rows, dtype=np.intp)
        )

        cells = np.concatenate(
            [
                (rows * 3 + 0) * d + (words % self._dim).astype(np.intp),
                (pair_rows * 3 + 1) * d + (pairs % self._dim).astype(np.intp),
                (np.repeat(rows, sizes) * 3 + 2) * d + np.concatenate(char_buckets),
            ]
        )
        weights = np.concatenate(
            [
                word_weights * _signs(words),
                pair_weights * _signs(pairs),
                np.repeat(word_weights, sizes) * np.concatenate(char_values),
            ]
        )
        per_group = np.bincount(cells, weights=weights, minlength=n * 3 * d).reshape(n, 3, d)
        norms = np.sqrt(np.einsum("ngd,ngd->ng", per_group, per_group))
        scale = np.divide(_GROUP_WEIGHT_VECTOR, norms, out=np.zeros_like(norms), where=norms > 0)
        return _unit_rows(np.einsum("ngd,ng->nd", per_group, scale)).astype(np.float32)


def _signs(hashes: np.ndarray) -> np.ndarray:
    """+1 or -1 from a hash bit that the bucket (the low bits) does not use."""
    return 1.0 - 2.0 * ((hashes >> _SIGN_BIT) & np.uint64(1)).astype(np.float64)


def _bigram_features(tokens: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (text, word pair) hashes with their rows and 1 + ln(tf) weights."""
    same_text = rows[:-1] == rows[1:]  # a pair never spans two texts
    pairs = _mix(tokens[:-1], tokens[1:])[same_text]
    pair_rows = rows[:-1][same_text]
    # Folding the row into the hash is one-to-one within a text, so one sort counts
    # pairs per text; across texts a clash needs a 64-bit coincidence.
    row_keys = pair_rows.astype(np.uint64)
    _, first, counts = np.unique(pairs ^ _mix(row_keys, row_keys), return_index=True, return_counts=True)
    return pairs[first], pair_rows[first], 1.0 + np.log(counts)


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


__all__ = ["DEFAULT_DIMENSION", "HashingEmbedder", "char_ngrams", "stable_hash", "tokenize"]
