"""A client's text quoted in a log line or on a terminal: every control character escaped,
the length bounded."""

from __future__ import annotations

import pytest

from spanscore.core.quoting import excerpt


@pytest.mark.parametrize(
    "text, quoted",
    [
        ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("nul\x00 del\x7f nel\x85", "nul\\x00 del\\x7f nel\\x85"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("bidi \u202eevil\u2066", "bidi \\u202eevil\\u2066"),
    ],
)
def test_control_characters_are_escaped(text, quoted):
    assert excerpt(text) == quoted


def test_long_text_is_cut_with_its_length():
    assert excerpt("x" * 1_000_000, 10) == "xxxxxxxxxx... (1000000 characters)"
    assert excerpt("\n" * 1_000, 3) == "\\n\\n\\n... (1000 characters)"
