"""Faithfulness without a judge: is each sentence of an answer supported by the context documents?

An answer's claims are its sentences (`text.sentences`); the context is cut into passages
the same way, each the sentence of one document. A claim's support is its best cosine
with any passage, from the embedder (one batch for the claims and passages together),
clamped to [0, 1]. Embeddings see meaning, not facts: "14 days" and "30 days" embed
alike. So a claim also has to agree with the documents on what it states exactly:

- its numbers (`text_values`): each must round, at the claim's own precision, to a
  number some document holds ("about 21" is held by 21.37; 14 is not held by 30);
- its names and codes: each word written with a capital that does not start the
  sentence ("Oslo", "NYC", "GPT"), other than English stop words, must be a word of some
  document by its stem, or a longer or shorter form of one (the shorter at least three
  letters and 60% of the longer: "Chile" holds "Chilean", "Mar" holds "March"; an
  abbreviation is no form: "USGS" is not held by "U.S. Geological Survey"); a code, a
  word with an `_`, `=`, `/` or a `.` between letters (`gen_ai.evaluation.score`,
  `example.com`; not `e.g.`), must be in some document on word boundaries.

A number or name the question holds is not held against the answer (it restates what
was asked). Summed token embeddings barely see a "not" either, so a claim whose
negation differs from its best passage's (one says `not`, `no`, `never`, `none`,
`nothing`, `neither`, `nor`, `without`, `cannot` or `-n't`, the other none of them)
keeps only `NEGATION_FACTOR` of its support.

A claim with a number or name that no document holds scores 0 and names what is
missing; otherwise it scores its support. The answer scores the mean over its claims:
the share of what it says that the context supports, read as the embedding's degree of
support rather than a yes/no per claim. A claim is quoted as unsupported when it scores
below `CLAIM_THRESHOLD`.

    support(c) = max over passages p of max(0, cos(c, p)), at p* the best passage
    score(c)   = 0                                  if c states a number or name no document holds
               = NEGATION_FACTOR * support(c)       if c and p* differ in negation
               = support(c)                         otherwise
    score      = mean over claims c of score(c)

Edge cases: an answer that states nothing (empty, or no word or number) scores 1.0,
since nothing in it is unsupported; an answer with no context documents (or only empty
ones) scores 0.0, since nothing supports it. A claim without a letter (only numbers and
signs: "42.") is scored by its numbers alone: 1.0 when all are held, else 0.

Bounds, whatever the sizes: the answer's first `MAX_ANSWER_CHARS` characters and at most
`MAX_CLAIMS` claims; each document's first `MAX_DOCUMENT_CHARS` characters, and at most
`MAX_PASSAGES` passages over all documents (taken from each document in turn). Numbers
and names are looked for in the same kept text. The last `READ_DOCUMENTS` documents
read (and at most `READ_CHARS` characters of them) are kept read (`read_document`),
since retrieval hands the same ones out again.

How often this agrees with people, on the labelled triples of
`tests/fixtures/faithfulness/`, and what it costs per call, are measured by
`bench/faithfulness.py` (figures in docs/metrics.md).
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.metrics.text import STOP_WORDS, sentences
from spanscore.processors.metrics.text_values import LETTERS, Phrase, Searchable, normalize, stem

NAME = "faithfulness"
# The answer passes at this score, and a claim below it is quoted as unsupported; both
# this and NEGATION_FACTOR were chosen on the dev half of the labelled triples.
DEFAULT_THRESHOLD = 0.55
CLAIM_THRESHOLD = DEFAULT_THRESHOLD
NEGATION_FACTOR = 0.6
# not|no|never|none|nothing|neither|nor|without|cannot as words, or -n't; factored, and led by
# what a match starts with so that the regex engine skips to those letters (3x faster).
_NEGATION = re.compile(
    r"(?=[nwc])(?:\b(?:n(?:o(?:t|ne|thing|r)?|e(?:ver|ither))|without|cannot)\b|n['’]t\b)", re.IGNORECASE
)
MAX_ANSWER_CHARS = 20_000
MAX_CLAIMS = 64
MAX_DOCUMENT_CHARS = 50_000
MAX_PASSAGES = 512
# Documents whose reading is kept, at most this many and this many characters of them. A
# batch of 64 traces with 5 documents each is 320 documents. Measured, a kept reading (the
# text, its passages, its normalized text and, once a claim asked, its numbers) takes about
# 5 bytes a character of prose, so ~10 MB at the bound, and up to 26 for text that is all
# numbers, ~52 MB at worst.
READ_DOCUMENTS = 1024
READ_CHARS = 2_000_000
# A name found by a longer or shorter form: the shorter this long at least, and this share of the longer.
MIN_FORM_LETTERS = 3
MIN_FORM_SHARE = 0.6
_EDGE_PUNCTUATION = "\"'.,;:!?()[]{}<>«»“”‘’`*"
# A code: `_`, `=` or `/`, or a dot between letters with a word of two on one side
# (`example.com`, `error.type`; not the abbreviations `e.g.`, `U.S.`).
_CODE = re.compile(r"[_=/]|[^\W\d_]{2}\.[^\W\d_]|[^\W\d_]\.[^\W\d_]{2}")
_CODE_SIGN = re.compile(r"[_=/.]")
# A token or a claim without a letter is only numbers and signs, checked as numbers.
_HAS_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class ClaimSupport:
    """One sentence of the answer and how the context supports it."""

    sentence: str
    support: float  # best cosine with a passage, in [0, 1]
    document: int | None  # the document holding that passage, its index among those given; None without one
    missing: tuple[str, ...] = ()  # its numbers and names that no document holds
    negation_differs: bool = False  # from the best passage's

    @property
    def score(self) -> float:
        if self.missing:
            return 0.0
        return NEGATION_FACTOR * self.support if self.negation_differs else self.support


@dataclass(frozen=True)
class Faithfulness:
    score: float
    claims: tuple[ClaimSupport, ...]
    documents: int  # context documents with text
    threshold: float = DEFAULT_THRESHOLD

    @property
    def passed(self) -> bool:
        return self.score >= self.threshold

    @property
    def unsupported(self) -> tuple[str, ...]:
        """The claims scoring below `CLAIM_THRESHOLD`, as the answer wrote them."""
        return tuple(claim.sentence for claim in self.claims if claim.score < CLAIM_THRESHOLD)

    @property
    def missing(self) -> tuple[str, ...]:
        """The numbers and names of the answer that no document holds, each once."""
        return tuple(dict.fromkeys(value for claim in self.claims for value in claim.missing))

    @property
    def reason(self) -> str:
        if not self.claims:
            return "the answer states nothing to check"
        if not self.documents:
            return "no context documents to support the answer"
        supported = sum(claim.score >= CLAIM_THRESHOLD for claim in self.claims)
        parts = [f"{supported} of {len(self.claims)} sentences supported by the context"]
        if self.missing:
            parts.append(
                "not in any document: " + ", ".join(self.missing[:5]) + (", ..." if len(self.missing) > 5 else "")
            )
        quoted = [f'"{_shorten(sentence)}"' for sentence in self.unsupported[:3]]
        if quoted:
            parts.append("unsupported: " + "; ".join(quoted) + ("; ..." if len(self.unsupported) > 3 else ""))
        return "; ".join(parts)


def _shorten(sentence: str, limit: int = 160) -> str:
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


@dataclass(frozen=True)
class Context:
    """The answer's claims and the documents' passages, read within bounds: what is embedded
    (`texts`, claims first) and what numbers and names are looked for in."""

    claims: tuple[str, ...]
    passages: tuple[str, ...]
    passage_documents: tuple[int, ...]  # each passage's document, by index
    documents: tuple[Searchable, ...]  # the kept text of each document with text
    known: Searchable  # the question

    @property
    def texts(self) -> list[str]:
        return [*self.claims, *self.passages]


def read_context(answer: str, documents: Sequence[str], question: str = "") -> Context:
    """Claims, passages and searchable documents, within the module's bounds."""
    claims = tuple(sentences(answer[:MAX_ANSWER_CHARS], MAX_CLAIMS))
    read = [read_document(document[:MAX_DOCUMENT_CHARS]) for document in documents]
    per_document = [found for found, _ in read]
    passages: list[str] = []
    owners: list[int] = []
    # Round robin, so that a long first document cannot take every passage.
    depth = 0
    while len(passages) < MAX_PASSAGES and any(depth < len(found) for found in per_document):
        for index, found in enumerate(per_document):
            if depth < len(found) and len(passages) < MAX_PASSAGES:
                passages.append(found[depth])
                owners.append(index)
        depth += 1
    searchable = tuple(text for _, text in read if text.text)
    return Context(claims, tuple(passages), tuple(owners), searchable, Searchable(question))


Reading = tuple[tuple[str, ...], Searchable]


class ReadingsInfo(NamedTuple):
    hits: int
    misses: int
    documents: int
    chars: int


class KeptReadings:
    """A document's passages and its searchable text, kept for the last documents read
    (least recently used out first, past `READ_DOCUMENTS` or `READ_CHARS`): the same
    documents are retrieved for many questions, and reading one costs more than looking
    its passages' vectors up in an embedding cache. Thread-safe."""

    def __init__(self, max_documents: int, max_chars: int):
        self.max_documents, self.max_chars = max_documents, max_chars
        self._kept: OrderedDict[str, Reading] = OrderedDict()
        self._chars = self._hits = self._misses = 0
        self._lock = threading.Lock()

    def __call__(self, text: str) -> Reading:
        with self._lock:
            reading = self._kept.get(text)
            if reading is not None:
                self._kept.move_to_end(text)
                self._hits += 1
                return reading
        reading = tuple(sentences(text, MAX_PASSAGES)), Searchable(text)
        with self._lock:
            self._misses += 1
            if text not in self._kept:
                self._kept[text] = reading
                self._chars += len(text)
            while len(self._kept) > self.max_documents or self._chars > self.max_chars:
                self._chars -= len(self._kept.popitem(last=False)[0])
        return reading

    def cache_clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._chars = self._hits = self._misses = 0

    def cache_info(self) -> ReadingsInfo:
        with self._lock:
            return ReadingsInfo(self._hits, self._misses, len(self._kept), self._chars)


read_document = KeptReadings(READ_DOCUMENTS, READ_CHARS)


def faithfulness(answer: str, documents: Sequence[str], embedder: Embedder, question: str = "") -> Faithfulness:
    """How far the context documents support the answer (see the module docstring)."""
    context = read_context(answer, documents, question)
    vectors = embedder.embed_sync(context.texts) if context.claims and context.passages else None
    return faithfulness_from_vectors(context, vectors)


def faithfulness_from_vectors(context: Context, vectors: np.ndarray | None) -> Faithfulness:
    """The score from the embeddings of `context.texts` (claims, then passages), which the
    caller may have batched with other work; None when there are no claims or passages."""
    if not context.claims:
        return Faithfulness(1.0, (), len(context.documents))
    if not context.documents or not context.passages or vectors is None:
        claims = tuple(ClaimSupport(sentence, 0.0, None, _missing(sentence, context)) for sentence in context.claims)
        return Faithfulness(0.0, claims, len(context.documents))
    count = len(context.claims)
    claim_vectors, passage_vectors = vectors[:count], vectors[count:]
    cosines = claim_vectors @ passage_vectors.T
    best = cosines.argmax(axis=1)
    claims = []
    for i, sentence in enumerate(context.claims):
        missing = _missing(sentence, context)
        if not _HAS_LETTER.search(sentence):  # only numbers and signs: its numbers say it all
            claims.append(ClaimSupport(sentence, 1.0, None, missing))
            continue
        passage = context.passages[best[i]]
        support = min(1.0, max(0.0, float(cosines[i, best[i]])))
        negation_differs = bool(_NEGATION.search(sentence)) != bool(_NEGATION.search(passage))
        claims.append(ClaimSupport(sentence, support, context.passage_documents[best[i]], missing, negation_differs))
    score = sum(claim.score for claim in claims) / len(claims)
    return Faithfulness(score, tuple(claims), len(context.documents))


def _holds_form(text: str, word: str) -> bool:
    """The normalized `text` has a word whose stem is the stem `word`, or a longer or shorter
    form of it (the shorter at least `MIN_FORM_LETTERS` letters and `MIN_FORM_SHARE` of the
    longer). Such a word starts with the first `MIN_FORM_SHARE` of `word`, so only the words
    starting so are read: str.find, no stems of the whole text."""
    start = word[: max(MIN_FORM_LETTERS, math.ceil(MIN_FORM_SHARE * len(word)))]
    at = text.find(start)
    while at != -1:
        if at == 0 or not text[at - 1].isalnum():
            found = LETTERS.match(text, at)
            if found is not None and _forms_of_one_word(stem(found.group()), word):
                return True
        at = text.find(start, at + 1)
    return False


def _forms_of_one_word(a: str, b: str) -> bool:
    if a == b:
        return True
    shorter, longer = sorted((a, b), key=len)
    return longer.startswith(shorter) and len(shorter) >= max(MIN_FORM_LETTERS, MIN_FORM_SHARE * len(longer))


def _missing(sentence: str, context: Context) -> tuple[str, ...]:
    """The claim's numbers and names that neither a document nor the question holds."""
    missing: list[str] = []
    claim = Searchable(sentence)
    for value, places in claim.numbers:
        if not context.known.holds_number(value, places) and not any(
            document.holds_number(value, places) for document in context.documents
        ):
            missing.append(f"{value:.{places}f}")
    for token in sentence.split()[1:]:  # a sentence's first word is capitalized anyway
        token = token.strip(_EDGE_PUNCTUATION)
        if token.islower() and not _CODE_SIGN.search(token):
            continue  # most words: no capital, no code (a cheap test before the regexes)
        if not _HAS_LETTER.search(token):
            continue
        if _CODE.search(token):
            code = Phrase(normalize(token), token)
            if not context.known.holds(code) and not any(document.holds(code) for document in context.documents):
                missing.append(token)
            continue
        for letters in LETTERS.findall(token):
            if len(letters) < 2 or not letters[0].isupper() or letters.lower() in STOP_WORDS:
                continue
            word = stem(normalize(letters))
            if _holds_form(context.known.text, word) or any(_holds_form(d.text, word) for d in context.documents):
                continue
            missing.append(letters)
    return tuple(dict.fromkeys(missing))


__all__ = [
    "CLAIM_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "NAME",
    "NEGATION_FACTOR",
    "ClaimSupport",
    "Context",
    "Faithfulness",
    "faithfulness",
    "faithfulness_from_vectors",
    "read_context",
    "KeptReadings",
    "ReadingsInfo",
    "read_document",
]
