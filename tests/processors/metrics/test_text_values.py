"""Values looked for in a text: the matching `ground_truth`'s utilization rule and
`faithfulness` share (their own tests cover the rest, through them)."""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.processors.metrics.text_values import NUMBER, Number, Searchable, normalize, number_of


def _normalize_slowly(text: str) -> str:
    """normalize without its fast path for ASCII text."""
    decomposed = unicodedata.normalize("NFKD", text.translate({0x2212: "-", 0x2013: "-", 0x2012: "-"}))
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(stripped.casefold().split())


def test_ascii_text_normalizes_as_any_text_does():
    for text in ("", "  Oslo\tIS\n\n21 C  ", "A-B_c.D; E=f", "".join(chr(i) for i in range(128))):
        assert normalize(text) == _normalize_slowly(text)
    assert normalize("São Paulo \u2212 ÉTÉ") == _normalize_slowly("São Paulo \u2212 ÉTÉ") == "sao paulo - ete"


def test_a_number_is_held_at_the_precision_asked_for():
    text = Searchable("It was 21.37 °C; 1,000 came; -3 at night.")
    assert text.holds_number(Decimal(21), 0)  # 21.37 rounds to 21
    assert text.holds_number(Decimal("21.4"), 1)
    assert not text.holds_number(Decimal("21.3"), 1)
    assert text.holds_number(Decimal(1000), 0) and text.holds_number(Decimal(-3), 0)
    assert not text.holds_number(Decimal(3), 0)
    # holds reads at the text's precision, had at the value's: 21 does not hold 21.4.
    assert not Searchable("about 21").holds_number(Decimal("21.4"), 1)
    assert Searchable("about 21").holds(Number(Decimal("21.4"), "21.4"))
    assert not Searchable("about 21").had(Number(Decimal("21.4"), "21.4"))


def test_stems_are_read_when_first_asked_for():
    text = Searchable("Thunderstorms over the cities")
    assert "stems" not in vars(text)
    assert text.stems == {"thunderstorm", "over", "the", "cit"}  # cities -> city -> cit, as city itself


# What a text's numbers are, written plainly: `[-+]?` NUMBER, not after a word character or
# a dot, not followed by a digit (Searchable's regex says the same, written to run faster).
_PLAIN_NUMBER = re.compile(r"(?<![\w.])([-+]?)" + NUMBER + r"(?![0-9])")


def _numbers_plainly(text: str) -> list[tuple[Decimal, int]]:
    return [(number_of(*found), len(found[2])) for found in _PLAIN_NUMBER.findall(normalize(text))]


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet="0123456789,.-+ a_é\n", max_size=40))
def test_a_text_s_numbers_are_read_as_plainly_written(text):
    assert Searchable(text).numbers == _numbers_plainly(text)


def test_numbers_signs_and_thousands_in_prose():
    text = "On 2024-05-01, -3.5 and +7 fell; 1,000,000 came, 12,34 did not, v1.2 is none, .5 neither, x-4 is 4."
    assert Searchable(text).numbers == _numbers_plainly(text)
    # A dash glued to a digit is no sign ("05", "01", "4"); "12,34" is two numbers; a digit
    # after a letter or a dot starts none ("v1.2", ".5").
    found = [float(value) for value, _ in Searchable(text).numbers]
    assert found == [2024, 5, 1, -3.5, 7, 1_000_000, 12, 34, 4, 4]
