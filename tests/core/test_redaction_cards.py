"""Payment card numbers are masked wherever redaction runs; the digit runs that are not
cards (timestamps, phone numbers, ids, order numbers failing Luhn) stay as they came."""

from __future__ import annotations

import pytest

from spanscore.core.redaction import CARD, Redaction, luhn, scrub

# Issuers' published test numbers: each passes Luhn.
VISA = "4111111111111111"
MASTERCARD = "5555555555554444"
MASTERCARD_2 = "2223003122003222"
AMEX = "378282246310005"
DINERS = "30569309025904"
DISCOVER = "6011000990139424"
VISA_19 = "4000000000000000006"


@pytest.mark.parametrize("number", [VISA, MASTERCARD, MASTERCARD_2, AMEX, DINERS, DISCOVER, VISA_19])
def test_test_numbers_pass_luhn(number):
    assert luhn(number)


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"card {VISA} on file", f"card {CARD} on file"),
        ("card 4111 1111 1111 1111.", f"card {CARD}."),
        ("card 4111-1111-1111-1111, thanks", f"card {CARD}, thanks"),
        ("amex 3782 822463 10005", f"amex {CARD}"),
        ("diners 3056-930902-5904", f"diners {CARD}"),
        ("19 digits: 4000 0000 0000 0000 006", f"19 digits: {CARD}"),
        (f'{{"pan": "{MASTERCARD}"}}', f'{{"pan": "{CARD}"}}'),
        (f"{DISCOVER}\n{MASTERCARD_2}", f"{CARD}\n{CARD}"),
    ],
)
def test_card_numbers_are_masked(text, expected):
    assert Redaction().text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "order 4111111111111112 shipped",  # 16 digits, fails Luhn
        "order 5555-5555-5555-4445",  # grouped, fails Luhn
        "at 2026-11-27T21:29:29.123456Z",
        "epoch ms 1732742969123, ns 1732742969123456789",  # start with 1, never an issuer's
        "call +1 415 555 0132 or +14155550132",
        "call +44 20 7946 0958",
        "trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
        "trace id 41111111111111110000000000000000",  # a card's digits inside a longer run
        f"x{VISA}",  # inside a word
        f"v{VISA}.5 and {VISA}.25",  # a number with a fraction
        "4111 1111-1111 1111",  # separators that no card is printed with
        "ids 4111 1111 1111 and 1111",  # 4-4-4 then a word: not a card's grouping
        "total 1,234,567,890,123,456",
        "4111111111111111111111",  # 22 digits
    ],
)
def test_digit_runs_that_are_not_cards_are_kept(text):
    assert Redaction().text(text) == text


def test_cards_are_masked_in_structured_values_and_log_lines_but_not_when_redaction_is_off():
    arguments = {"customer": {"card": "4111 1111 1111 1111", "order": "4111111111111112"}}
    assert Redaction().value(arguments) == {"customer": {"card": CARD, "order": "4111111111111112"}}
    assert scrub(f"402 card {AMEX} declined") == f"402 card {CARD} declined"
    assert Redaction(builtin=False).text(VISA) == VISA
