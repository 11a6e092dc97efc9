"""Counts in messages: `1 trace`, `2 traces`, never `1 traces`."""

from __future__ import annotations


def plural(n: float, singular: str, plural_form: str | None = None) -> str:
    """The noun as it reads after the number `n`; `plural_form` when not `singular` + "s"."""
    return singular if n == 1 else plural_form or singular + "s"


def counted(n: int, singular: str, plural_form: str | None = None) -> str:
    """`n` and its noun, thousands separated: `1 trace`, `1,200 spans`."""
    return f"{n:,} {plural(n, singular, plural_form)}"
