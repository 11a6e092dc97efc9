"""Does an answer use what the tools returned? The values of tool results, found in the answer.

The deterministic side of tool utilization, used where no judge decided it. An answer
written for people does not paste a tool's JSON; it states the values in it, in its own
words, so values are what is looked for:

- a result that is JSON: its leaves, strings and numbers, at any depth (not object keys,
  not booleans or null); a string that is itself JSON text is read as JSON; a one-word
  string that reads as a number, with a sign, a currency or a unit around it (`-3`,
  `$3.50`, `21°C`), is that number;
- a result that is not JSON, and a JSON string of several words: the whole text, plus
  its numbers, its codes (words holding a digit or an underscore: `AF123`, `10:45`,
  `get_weather`) and its words, in any case: each word of at least four letters, and
  each shorter word written with a capital (`Oslo`, `NYC`), that is not a generic word.
  Generic words are English function words and the words any tool's or agent's text is
  made of whatever it found (`search`, `page`, `result`, `code`, `error`, `found`,
  `provide`, ...: `GENERIC_WORDS`). A one-word string is a word.

The matching is `processors/metrics/text_values.py`'s, which `faithfulness` shares.
Text is normalized on both sides: Unicode NFKD with accents dropped, casefolded, the minus
sign and the en and figure dashes read as `-`, whitespace collapsed. A number is found when
a number of the answer rounds to it at the answer's precision: |value - number| <= half a
unit of the number's last digit, so 21 is found in "21°C" and "21.0", 21.37 in "about 21",
never in "210" or "2.1". The answer's numbers are digit runs not glued to a letter or a
longer number ("A320" holds none, "1.21" only 1.21), signed when a `-` or `+` is not glued
to a word, `1,000` read as a thousand. A whole text or a code is found when it is in the
answer on word boundaries ("rain" in "light rain", not in "rainy"). A word is found when a
word of the answer has the same stem: the word without a plural `-s`/`-es`/`-ies`, a
possessive `'s`, an `-ing` or `-ed`, and a final `-y` (`thunderstorms` and
`thunderstorm`, `snowy` and `snow`, `cities` and `city`).

Informative values: a number, or a text of at least two letters or digits, which the
agent did not have before the call: a value found in the turn's user input or in the
call's arguments (the city asked about, echoed by the tool; a word of the question) is no
evidence of the result being used. A number counts as had only when those texts hold it
at the result's own precision: an agent that started from -5 did not have -4.9375.

A result that failed or came back empty is used when the answer reacts to it: an error
read, an empty output noticed ("the table was not found"), which states no value of it.
A result reports a failure or nothing when what it printed is empty, `False`, `None`,
`null`, `[]` or `{}` (after a code runner's status line `exitcode: ...` and `Code output:`
label), or when its first `FAILURE_CHARS` characters (a JSON result's strings, and its
keys whose value is not empty) say so in the words of `FAILURE_WORDS`: `not found`,
`no ... found`, `no results`, `unable to`, `could not`, `cannot`, `did not`, `failed`,
`error`, `exception`, `empty`, `there is no`, `none`, ... The answer reacts when its first
`REACTION_CHARS` characters hold such words too.

`answer_utilization`: 1.0 when at least one informative value of some result is found
in the answer, or the answer reacts to a result that failed or came back empty, else
0.0. One value suffices, not a share: an answer summarizes (the sky and the temperature
of a weather report, not its humidity), and a result can feed the next call rather than
the answer (an id looked up, then fetched). When the tools returned no
informative value (no result recorded, empty results, only booleans) there is nothing
the answer could ignore: 1.0. A turn without tool calls used no tool result: 0.0.

How often this agrees with people who read real results and answers is measured in
`bench/utilization_rule.py` (figures in docs/eval-suites.md).

A result of any size is read within bounds: `MAX_VALUES` values, the first
`MAX_TEXT_CHARS` characters of each text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from spanscore.processors.metrics.text import STOP_WORDS
from spanscore.processors.metrics.text_values import (
    LETTERS,
    NUMBER,
    Number,
    Phrase,
    Searchable,
    Value,
    Word,
    normalize,
    number_of,
    stem,
)

# A word that is a number, with a currency sign before and a unit after: "-3", "$21.50", "21°C".
_NUMBER_WORD = re.compile(r"([-+]?)[^\w\s]?" + NUMBER + r"[^0-9]*")
_EDGE_PUNCTUATION = "\"'.,;:!?()[]{}<>«»“”‘’`*"
MIN_TEXT_CHARS = 2  # letters or digits a text value needs: "C" or "a" would be found anywhere
MIN_WORD_LETTERS = 4  # a shorter word is a value only when written with a capital: "Oslo", "NYC"
# Words that say nothing of what a tool found: English function words, the words of any
# tool's or agent's text about searching, pages, code and results, and the commonest verbs.
GENERIC_WORDS: frozenset[str] = STOP_WORDS | frozenset(
    """
    am an as at be by do go he if in is it me my no of on or so to up us we
    are and but can did for get got had has her him his how its let may nor not now off one our own
    per see she the too two use via was who why yes yet you
    about above after again against almost also although always among another anyone anything around
    back because below cannot does doing done down else enough even ever further
    gets getting give given gives goes going gone here hers herself himself however itself
    just least less like likely made make makes many must myself near need needs never next none
    often once onto others otherwise ours ourselves over perhaps please rather really seem seems
    several since something still their theirs them themselves then there these they thing things
    this those though thus together toward towards until upon used uses using well what whatever
    when where whether which while whom whose with within without would your yours yourself
    first last found find finding look looking looked show shows shown showing seen lets
    search searched searches searching result results page pages webpage website site link links
    click clicked scroll scrolled http https html screenshot viewport browser
    data information info details detail text content
    code execute executed execution output outputs log logs running script error errors file files
    provide provided provides request requested task question answer answers message messages
    tool tools call calls function functions agent agents assistant user reply conversation
    """.split()
)
# Bounds on the work per result, whatever its size: the values kept, the text read.
MAX_VALUES = 1000
MAX_TEXT_CHARS = 100_000
# Words that report a failure or nothing found, in a result and in an answer reacting to it.
FAILURE_WORDS = re.compile(
    r"""\b(?:
        not\s+(?:\w+\s+){0,3}?(?:found|located|retrieved|returned|available|provided|exists?)
      | no\s+[^.\n]{0,40}?\b(?:found|returned|available)
      | no\s+(?:results?|matches|data|output)
      | nothing\s+(?:was\s+)?(?:found|returned)
      | unable\s+to | could\s*n[o'’]t | cannot | can[’']t | did\s*n[o'’]t | does\s*n[o'’]t\s+exist
      | fail(?:s|ed|ure)? | errors? | exception | traceback | empty
      | there\s+(?:is|are)\s+no | is\s*n[o'’]t\s+any | none
    )\b""",
    re.VERBOSE,
)
FAILURE_CHARS = 600  # a result says up front that it failed or found nothing
REACTION_CHARS = 1500  # an answer reacts to it before going on
# What a code runner prints before the code's own output: its status line and a label.
_RUNNER_HEADER = re.compile(r"^exitcode:[^\n]*\n(?:code output:)?", re.IGNORECASE)
_NOTHING = frozenset({"", "false", "none", "null", "nil", "nan", "[]", "{}", '""', "''"})


_GENERIC_STEMS = frozenset(stem(word) for word in GENERIC_WORDS)


def result_values(result: str | None) -> list[Value]:
    """The values of one tool result (see the module docstring), each once, in order: at
    most `MAX_VALUES`, from the first `MAX_TEXT_CHARS` of each text."""
    if result is None or not result.strip():
        return []
    parsed = _loads(result)
    values = _text_values(result) if parsed is _NOT_JSON else _json_values(parsed)
    unique: dict[tuple[str, Any], Value] = {}
    for value in values:
        unique.setdefault(_key(value), value)
        if len(unique) == MAX_VALUES:
            break
    return list(unique.values())


def _key(value: Value) -> tuple[str, Any]:
    if isinstance(value, Number):
        return ("number", value.value)
    if isinstance(value, Word):
        return ("word", value.stem)
    return ("text", value.text)


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
                one = _word_value(text.strip(_EDGE_PUNCTUATION) or text)
                if one is not None:
                    yield one
            elif text:
                yield from _text_values(text)


def _text_values(text: str) -> Iterator[Value]:
    text = text[:MAX_TEXT_CHARS]
    yield Phrase(normalize(text), text.strip())
    for match in re.finditer(r"\S+", text):
        word = match.group().strip(_EDGE_PUNCTUATION)
        if any(c.isdigit() or c == "_" for c in word):
            yield _code_value(word)
        else:
            for letters in LETTERS.finditer(word):
                value = _letters_value(letters.group())
                if value is not None:
                    yield value


def _word_value(word: str) -> Value | None:
    """A one-word string: a number or a code when it holds a digit, an underscore or other
    signs; else a word, or nothing when the word is too short or generic."""
    if word.isalpha():
        return _letters_value(word)
    return _code_value(word)


def _code_value(word: str) -> Number | Phrase:
    """A word with more than letters: a number when it reads as one (units and currency
    around it allowed), else a code."""
    number = _NUMBER_WORD.fullmatch(normalize(word))
    if number is not None:
        return Number(number_of(*number.groups()), word)
    return Phrase(normalize(word), word)


def _letters_value(letters: str) -> Word | None:
    """A run of letters as a word value, or None when it is too short or generic."""
    folded = normalize(letters)
    stemmed = stem(folded)
    if folded in GENERIC_WORDS or stemmed in _GENERIC_STEMS:  # "finds" is as generic as "find"
        return None
    if len(folded) < MIN_WORD_LETTERS and (len(folded) < MIN_TEXT_CHARS or letters == letters.lower()):
        return None
    return Word(stemmed, letters)


def informative(value: Value) -> bool:
    """Numbers and words always (a word value is made only of an informative word); a whole
    text or a code with at least `MIN_TEXT_CHARS` letters or digits."""
    if isinstance(value, (Number, Word)):
        return True
    return sum(c.isalnum() for c in value.text) >= MIN_TEXT_CHARS


def reports_failure(result: str | None) -> bool:
    """The result failed or came back empty (see the module docstring); no result recorded is not one."""
    if result is None:
        return False
    parsed = _loads(result)
    if parsed is _NOT_JSON:
        printed = _RUNNER_HEADER.sub("", result.strip()).strip()
        if printed.casefold() in _NOTHING:
            return True
        return FAILURE_WORDS.search(normalize(result[:FAILURE_CHARS])) is not None
    if parsed is None or parsed is False or (isinstance(parsed, (str, list, dict)) and not parsed):
        return True
    return FAILURE_WORDS.search(normalize(_json_text(parsed)[:FAILURE_CHARS])) is not None


def _json_text(root: Any) -> str:
    """A JSON result's strings and the keys of its non-empty values, in document order, up to
    `FAILURE_CHARS` characters: `{"error": "timeout"}` reports a failure, `{"error": null}` not."""
    parts: list[str] = []
    size = 0
    stack = [root]
    while stack and size < FAILURE_CHARS:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if item not in (None, False, "", [], {}):
                    stack.extend((item, key))
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, str):
            parts.append(value)
            size += len(value) + 1
    return " ".join(parts)


def reaction(answer: str) -> str:
    """The words with which the answer says a call failed or found nothing, or ""."""
    match = FAILURE_WORDS.search(normalize(answer[:REACTION_CHARS]))
    return match.group() if match else ""


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
    reaction: str = ""  # the answer's words reacting to a result that failed or came back empty

    @property
    def reason(self) -> str:
        if not self.calls:
            return "no tool calls"
        if not self.looked_for:
            return "no values in the tool results to look for"
        if self.found:
            # Each value once (two calls may return the same), and not the words of a text shown.
            distinct: list[str] = []
            for value in dict.fromkeys(self.found):
                if not any(_within(value, shown) for shown in distinct):
                    distinct.append(value)
            shown = ", ".join(distinct[:3]) + (", ..." if len(distinct) > 3 else "")
            return f"values found: {shown}"
        if self.reaction:
            return f'reacts to a failed or empty result: "{self.reaction}"'
        return f"none of the {self.looked_for} values of the tool results found in the answer"


def _within(word: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word.casefold())}(?!\w)", text.casefold()) is not None


def answer_utilization(answer: str, outcomes: Sequence[ToolOutcome]) -> Utilization:
    """1.0 when the answer holds an informative value of some result, or reacts to a result
    that failed or came back empty, else 0.0 (see above)."""
    searchable = Searchable(answer)
    looked_for, found, failed = 0, [], False
    for outcome in outcomes:
        known = Searchable(outcome.known)
        for value in result_values(outcome.result):
            if informative(value) and not known.had(value):
                looked_for += 1
                if searchable.holds(value):
                    found.append(value.shown)
        failed = failed or reports_failure(outcome.result)
    reacted = reaction(answer) if failed and not found else ""
    if not outcomes:
        score = 0.0
    else:
        score = 1.0 if found or reacted or not looked_for else 0.0
    return Utilization(score, tuple(found), looked_for, len(outcomes), reacted)


def known_text(user_input: str, arguments: Any) -> str:
    """What the agent had before a call, as text: the turn's user input and the call's arguments."""
    if isinstance(arguments, (dict, list)):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"{user_input}\n{arguments or ''}"


__all__ = [
    "FAILURE_WORDS",
    "GENERIC_WORDS",
    "Number",
    "Phrase",
    "Searchable",
    "ToolOutcome",
    "Utilization",
    "Word",
    "answer_utilization",
    "informative",
    "known_text",
    "normalize",
    "reaction",
    "reports_failure",
    "result_values",
    "stem",
]
