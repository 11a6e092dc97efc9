"""Values looked for in a text: numbers at a precision, phrases on word boundaries, words by stem.

The matching the no-judge metrics share when they ask "does this text state that value?"
(`ground_truth`'s utilization rule asks it of an answer and a tool's result values,
`faithfulness` of the context documents and an answer's numbers and names).

Text is normalized on both sides: Unicode NFKD with accents dropped, casefolded, the minus
sign and the en and figure dashes read as `-`, whitespace collapsed. A text's numbers are
digit runs not glued to a letter or a longer number ("A320" holds none, "1.21" only
1.21), signed when a `-` or `+` is not glued to a word, `1,000` read as a thousand, each
with its decimal places as written. A number is found at a precision when a number of the
text is within half a unit of that precision's last digit: at the text's own precision
(`holds`: 21 is found in "21°C" and "21.0", 21.37 in "about 21", never in "210" or "2.1"),
or at the value's (`holds_number`, `had`: knowing -5 is not knowing -4.9375). A phrase is
found on word boundaries ("rain" in "light rain", not in "rainy"); a word when a word of
the text has the same stem (`stem`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from decimal import Decimal

NUMBER = r"([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?"
# A number in normalized text: `[-+]?` NUMBER not glued to a word or a longer number
# before it. Written to start with one class, its first character, so that the regex
# engine skips to signs and digits (as fast as a scan) and tries the lookbehind only
# there: the sign, or NUMBER's first digit, then the rest of what NUMBER matches.
_IN_TEXT = re.compile(
    r"([-+0-9])(?<![\w.].)"
    r"(?:(?<=[-+])([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)|(?<=[0-9])([0-9]{0,2}(?:,[0-9]{3})+|[0-9]*))"
    r"(?:\.([0-9]+))?(?![0-9])"
)
LETTERS = re.compile(r"[^\W\d_]+")  # a run of letters: the words of a text
_DASHES = ("\u2212", "\u2013", "\u2012")  # minus, en and figure dashes


@dataclass(frozen=True)
class Number:
    value: Decimal
    shown: str  # as the text wrote it

    @property
    def places(self) -> int:
        """Decimal places as written: 4.9375000000 has ten."""
        exponent = self.value.as_tuple().exponent
        return -exponent if isinstance(exponent, int) and exponent < 0 else 0


@dataclass(frozen=True)
class Phrase:
    """A whole text or a code, found on word boundaries."""

    text: str  # normalized
    shown: str


@dataclass(frozen=True)
class Word:
    """A word, found by its stem."""

    stem: str
    shown: str


Value = Number | Phrase | Word


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _without_combining(run: re.Match[str]) -> str:
    return "".join(c for c in run.group() if not unicodedata.combining(c))


def normalize(text: str) -> str:
    """Accents dropped, compatibility forms folded, dashes read as minus, casefolded, whitespace collapsed."""
    if text.isascii():  # nothing to decompose, fold or translate: the per-character pass is skipped
        return " ".join(text.casefold().split())
    for dash in _DASHES:  # str.replace, not str.translate: that reads non-ASCII text a character at a time
        text = text.replace(dash, "-")
    decomposed = unicodedata.normalize("NFKD", text)
    # Only non-ASCII characters can be combining marks: read those runs, not every character.
    stripped = _NON_ASCII.sub(_without_combining, decomposed)
    return " ".join(stripped.casefold().split())


def stem(word: str) -> str:
    """A normalized word without its plural, possessive, `-ing`/`-ed` and final `-y`, so that
    the forms of one word meet: thunderstorms/thunderstorm, snowy/snow, cities/city.
    Both sides are stemmed alike, so a stem need not be a word ("citi" is fine)."""
    if word.endswith(("'s", "’s")):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if word[-1] == word[-2] and word[-1] not in "ls":  # stopped -> stop, not fell -> fel
                word = word[:-1]
            break
    if len(word) > 3 and word.endswith("y"):
        word = word[:-1]
    return word


def number_of(sign: str, whole: str, fraction: str | None) -> Decimal:
    """The value of a number matched by `NUMBER` (and a sign before it)."""
    return Decimal(f"{'-' if sign == '-' else ''}{whole.replace(',', '')}.{fraction or '0'}")


def _tolerance(places: int) -> Decimal:
    """Half a unit of the last digit at `places` decimal places."""
    return Decimal(5).scaleb(-places - 1)


class Searchable:
    """A text normalized once, with its numbers (value, decimal places) and word stems read once."""

    def __init__(self, text: str):
        self.text = normalize(text)

    @functools.cached_property
    def numbers(self) -> list[tuple[Decimal, int]]:
        """The text's numbers, read when first asked for: a document is often searched
        for names only, or its number found in a document before it."""
        return [
            (number_of(first, signed, fraction), len(fraction))
            if first in "+-"
            else (number_of("", first + rest, fraction), len(fraction))
            for first, signed, rest, fraction in _IN_TEXT.findall(self.text)
        ]

    @functools.cached_property
    def stems(self) -> set[str]:
        """The stems of the text's words, read when first asked for (a long text has many)."""
        return {stem(word) for word in LETTERS.findall(self.text)}

    def holds(self, value: Value) -> bool:
        """The value is in the text: a number rounded at the text's precision, a word by its stem."""
        if isinstance(value, Number):
            return any(abs(value.value - number) <= _tolerance(places) for number, places in self.numbers)
        if isinstance(value, Word):
            return value.stem in self.stems
        # str.find, not a regex: a result's text can be long, and each would be compiled.
        phrase, text = value.text, self.text
        at = text.find(phrase)
        while at != -1:
            before = text[at - 1] if at else " "
            after = text[at + len(phrase)] if at + len(phrase) < len(text) else " "
            if not (_word_char(phrase[0]) and _word_char(before)) and not (
                _word_char(phrase[-1]) and _word_char(after)
            ):
                return True
            at = text.find(phrase, at + 1)
        return False

    def holds_number(self, value: Decimal, places: int) -> bool:
        """A number of the text rounds to `value` at `places` decimal places: "about 21"
        (places 0) is held by a text saying 21.37; 21.4 (places 1) is not."""
        tolerance = _tolerance(places)
        return any(abs(value - number) <= tolerance for number, _ in self.numbers)

    def had(self, value: Value) -> bool:
        """What an agent had before a call (this text) covers the value: a number only at the
        value's own precision, so that knowing -5 is not knowing -4.9375."""
        if isinstance(value, Number):
            return self.holds_number(value.value, value.places)
        return self.holds(value)


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


__all__ = [
    "LETTERS",
    "NUMBER",
    "Number",
    "Phrase",
    "Searchable",
    "Value",
    "Word",
    "normalize",
    "number_of",
    "stem",
]
