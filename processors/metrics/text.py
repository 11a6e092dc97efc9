"""Word sets and Jaccard similarity (the lexical half of loop detection), and sentences.

Tokens are the `\\w+` runs of the lowercased text (Unicode-aware, so accented and
non-Latin words are kept whole), minus one-character tokens and English stop words.
What is left are the content words whose overlap says two outputs repeat each other;
function words would make any two English sentences look alike.
"""

from __future__ import annotations

import re
from collections.abc import Set

WORD = re.compile(r"\w+")

# Single-character tokens ("a", "I", digits, stray letters) carry no content either.
MIN_TOKEN_LENGTH = 2

STOP_WORDS: frozenset[str] = frozenset(
    """
    a an the
    is are was were be been being
    have has had do does did
    will would shall should may might can could
    of in to for on with at by from as into through during before after above below
    and but or nor not so yet both either neither each every all any few more most
    other some such no only own same than too very
    it its
""".split()
)


def word_set(text: str) -> frozenset[str]:
    """The distinct content words of `text`, lowercased.

    >>> sorted(word_set("The agent called the Weather API, then the weather API again."))
    ['again', 'agent', 'api', 'called', 'then', 'weather']

    Punctuation separates words, so contractions and hyphenated words split, and
    one-letter pieces such as the "t" of "don't" go:

    >>> sorted(word_set("don't re-run it"))
    ['don', 're', 'run']

    `\\w` includes digits, the underscore and letters of every script, so identifiers,
    numbers and non-English words survive whole:

    >>> sorted(word_set("get_weather(city='Zürich') -> 21 °C, 東京"))
    ['21', 'city', 'get_weather', 'zürich', '東京']
    """
    return frozenset(
        token for token in WORD.findall(text.lower()) if len(token) >= MIN_TOKEN_LENGTH and token not in STOP_WORDS
    )


# Where a sentence may end: after . ! ? or ; and a space, or at a line break. Led by the
# marks as one class, so that the regex engine skips to them (3x faster than an alternation).
_BREAK = re.compile(r"[.!?;\n](?:(?<=\n)\s*|\s+)")
_ALNUM = re.compile(r"[^\W_]")  # a letter or a digit: what str.isalnum() says of a character


def sentences(text: str, limit: int | None = None) -> list[str]:
    """The sentences of `text` that hold a word or a number, in order, at most `limit`.

    A sentence ends at `.`, `!` or `?` before a space and something other than a lowercase
    letter ("e.g. the" goes on), at `;` before a space, and at a line break:

    >>> sentences("It rained in Oslo; 14 mm fell. Then it cleared, e.g. at noon.\\n- ok")
    ['It rained in Oslo;', '14 mm fell.', 'Then it cleared, e.g. at noon.', '- ok']

    Splitting is by punctuation, not grammar: an abbreviation before a capital
    ("U.S. Navy") ends a sentence too. Parts with no letter or digit are left out.
    """
    found: list[str] = []
    start = 0
    for match in _BREAK.finditer(text):
        mark, end = text[match.start()], match.end()
        if mark in ".!?" and "\n" not in match.group() and end < len(text) and text[end].islower():
            continue
        if _keep(text[start : match.start() + (mark != "\n")], found) and limit is not None and len(found) >= limit:
            return found
        start = end
    _keep(text[start:], found)
    return found if limit is None else found[:limit]


def _keep(part: str, found: list[str]) -> bool:
    """Adds the part, stripped, when it holds a letter or a digit; says whether it did."""
    part = part.strip()
    if _ALNUM.search(part):
        found.append(part)
        return True
    return False


def jaccard(a: Set[str], b: Set[str]) -> float:
    """|a ∩ b| / |a ∪ b|, in [0, 1].

    Two empty sets score 0, not 1: outputs with no content words cannot be shown to
    repeat each other, and loop detection must not flag them as a loop.
    """
    union = len(a | b)
    if union == 0:
        return 0.0
    return len(a & b) / union


def text_jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of two texts."""
    return jaccard(word_set(a), word_set(b))


__all__ = ["MIN_TOKEN_LENGTH", "STOP_WORDS", "jaccard", "sentences", "text_jaccard", "word_set"]
