"""Does an answer use what the tools returned? The values of tool results, found in the answer.

The deterministic side of tool utilization, used where no judge decided it. An answer
written for people does not paste a tool's JSON; it states the values in it, so values
are what is looked for:

- a result that is JSON: its leaves, strings and numbers, at any depth (not object keys,
  not booleans or null); a string that is itself JSON text is read as JSON; a one-word
  string that reads as a number, with a sign, a currency or a unit around it (`-3`,
  `$3.50`, `21°C`), is that number;
- a result that is not JSON, and a JSON string of several words: the whole text, plus
  its numbers, its codes (words holding a digit: `AF123`, `10:45`) and its names (words
  with a capital letter, not the first word of a sentence or line, so that "The" or
  "Snowing" starting a sentence is no name). Lowercase words are not values.

Text is normalized on both sides: Unicode NFKD with accents dropped, casefolded, the minus
sign read as `-`, whitespace collapsed. A number is found when a number of the answer
rounds to it at the answer's precision: |value - number| <= half a unit of the number's
last digit, so 21 is found in "21°C" and "21.0", 21.37 in "about 21", never in "210" or
"2.1". The answer's numbers are digit runs not glued to a letter or a longer number
("A320" holds none, "1.21" only 1.21), signed when a `-` or `+` is not glued to a word,
`1,000` read as a thousand. A string is found when its text is in the answer on word
boundaries ("rain" in "light rain", not in "rainy").

Informative values: a number, or a text of at least two letters or digits, which the
agent did not have before the call: a value found in the turn's user input or in the
call's arguments (the city asked about, echoed by the tool) is no evidence of the
result being used.

`answer_utilization`: 1.0 when at least one informative value of some result is found
in the answer, else 0.0. One suffices, not a share: an answer summarizes (the sky and the
temperature of a weather report, not its humidity), and a result can feed the next call
rather than the answer (an id looked up, then fetched). When the tools returned no
informative value (no result recorded, empty results, only booleans) there is nothing
the answer could ignore: 1.0. A turn without tool calls used no tool result: 0.0.

A result of any size is read within bounds: `MAX_VALUES` values, the first
`MAX_TEXT_CHARS` characters of each text.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

_NUMBER = r"([0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]+))?"
# A number in normalized text: not glued to a word or a longer number before it.
_IN_TEXT = re.compile(r"(?<![\w.])([-+]?)" + _NUMBER + r"(?![0-9])")
# A word that is a number, with a currency sign before and a unit after: "-3", "$21.50", "21°C".
_NUMBER_WORD = re.compile(r"([-+]?)[^\w\s]?" + _NUMBER + r"[^0-9]*")
_EDGE_PUNCTUATION = "\"'.,;:!?()[]{}<>«»“”‘’`*"
_SENTENCE_END = re.compile(r"[.!?][\"')\]»”’]*$")
MIN_TEXT_CHARS = 2  # letters or digits a text value needs: "C" or "a" would be found anywhere
# Bounds on the work per result, whatever its size: the values kept, the text read.
MAX_VALUES = 1000
MAX_TEXT_CHARS = 100_000


@dataclass(frozen=True)
class Number:
    value: Decimal
    shown: str  # as the result wrote it


@dataclass(frozen=True)
class Phrase:
    text: str  # normalized
    shown: str


Value = Number | Phrase


def normalize(text: str) -> str:
    """Accents dropped, compatibility forms folded, casefolded, whitespace collapsed."""
    decomposed = unicodedata.normalize("NFKD", text.replace("\u2212", "-"))
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(stripped.casefold().split())


class Searchable:
    """A text normalized once, with its numbers (value, decimal places) read once."""

    def __init__(self, text: str):
        self.text = normalize(text)
        self.numbers = [
            (_decimal(sign, whole, fraction), len(fraction or ""))
            for sign, whole, fraction in _IN_TEXT.findall(self.text)
        ]

    def holds(self, value: Value) -> bool:
        if isinstance(value, Number):
            return any(abs(value.value - number) <= Decimal(5).scaleb(-places - 1) for number, places in self.numbers)
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


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def result_values(result: str | None) -> list[Value]:
    """The values of one tool result (see the module docstring), each once, in order: at
    most `MAX_VALUES`, from the first `MAX_TEXT_CHARS` of each text."""
    if result is None or not result.strip():
        return []
    parsed = _loads(result)
    values = _text_values(result) if parsed is _NOT_JSON else _json_values(parsed)
    unique: dict[tuple[str, Any], Value] = {}
    for value in values:
        key = ("number", value.value) if isinstance(value, Number) else ("text", value.text)
        unique.setdefault(key, value)
        if len(unique) == MAX_VALUES:
            break
    return list(unique.values())


_NOT_JSON = object()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # deep nesting is refused, not followed
        return _NOT_JSON


def _json_values(root: Any) -> Iterator[Value]:
    """The leaves, depth first in document order; iterative, so no depth can exhaust the stack."""
    stack = [root]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, (int, float)):
            try:
                number = Decimal(str(value))
            except InvalidOperation:
                continue
            if number.is_finite():  # json.loads reads NaN and Infinity too
                yield Number(number, str(value))
        elif isinstance(value, str):
            text = value.strip()
            parsed = _loads(text) if text[:1] in ("{", "[") else _NOT_JSON
            if parsed is not _NOT_JSON:
                stack.append(parsed)
            elif len(text.split()) == 1:
                yield _word_value(text)
            elif text:
                yield from _text_values(text)


def _text_values(text: str) -> Iterator[Value]:
    text = text[:MAX_TEXT_CHARS]
    yield Phrase(normalize(text), text.strip())
    previous_end, words = 0, list(re.finditer(r"\S+", text))
    for index, match in enumerate(words):
        word = match.group().strip(_EDGE_PUNCTUATION)
        gap = text[previous_end : match.start()]
        starts_sentence = index == 0 or "\n" in gap or _SENTENCE_END.search(words[index - 1].group()) is not None
        previous_end = match.end()
        if not word:
            continue
        if any(c.isdigit() for c in word):
            yield _word_value(word)
        elif not starts_sentence and word != word.lower():
            yield Phrase(normalize(word), word)


def _word_value(word: str) -> Value:
    """One word: a number when it reads as one (units and currency around it allowed), else its text."""
    number = _NUMBER_WORD.fullmatch(normalize(word))
    if number is not None:
        return Number(_decimal(*number.groups()), word)
    return Phrase(normalize(word), word)


def _decimal(sign: str, whole: str, fraction: str | None) -> Decimal:
    return Decimal(f"{'-' if sign == '-' else ''}{whole.replace(',', '')}.{fraction or '0'}")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def informative(value: Value) -> bool:
    if isinstance(value, Number):
        return True
    return sum(c.isalnum() for c in value.text) >= MIN_TEXT_CHARS


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call of the turn: its recorded result, and what the agent knew before it
    (the turn's user input and the call's arguments, as text)."""

    result: str | None
    known: str = ""


@dataclass(frozen=True)
class Utilization:
    score: float
    found: tuple[str, ...]  # the informative values found, as the results wrote them
    looked_for: int  # informative values over all results
    calls: int

    @property
    def reason(self) -> str:
        if not self.calls:
            return "no tool calls"
        if not self.looked_for:
            return "no values in the tool results to look for"
        if self.found:
            distinct = list(dict.fromkeys(self.found))  # two calls may return the same value
            shown = ", ".join(distinct[:3]) + (", ..." if len(distinct) > 3 else "")
            return f"values found: {shown}"
        return f"none of the {self.looked_for} values of the tool results found in the answer"


def answer_utilization(answer: str, outcomes: Sequence[ToolOutcome]) -> Utilization:
    """1.0 when the answer holds an informative value of some result, else 0.0 (see above)."""
    searchable = Searchable(answer)
    looked_for, found = 0, []
    for outcome in outcomes:
        known = Searchable(outcome.known)
        for value in result_values(outcome.result):
            if informative(value) and not known.holds(value):
                looked_for += 1
                if searchable.holds(value):
                    found.append(value.shown)
    if not outcomes:
        score = 0.0
    else:
        score = 1.0 if found or not looked_for else 0.0
    return Utilization(score, tuple(found), looked_for, len(outcomes))


def known_text(user_input: str, arguments: Any) -> str:
    """What the agent had before a call, as text: the turn's user input and the call's arguments."""
    if isinstance(arguments, (dict, list)):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"{user_input}\n{arguments or ''}"


__all__ = [
    "Number",
    "Phrase",
    "Searchable",
    "ToolOutcome",
    "Utilization",
    "answer_utilization",
    "informative",
    "known_text",
    "normalize",
    "result_values",
]
