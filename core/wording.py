"""Counts in messages: `1 trace`, `2 traces`, never `1 traces`."""

from __future__ import annotations

# Nouns whose plural is not the singular plus "s".
_IRREGULAR = {"entry": "entries", "summary": "summaries", "process": "processes", "class": "classes"}


def plural(n: float, noun: str) -> str:
    """`noun` as it reads after the number `n`."""
    return noun if n == 1 else _IRREGULAR.get(noun, noun + "s")


def counted(n: int, noun: str) -> str:
    """`n` and its noun, with thousands separated: `1 trace`, `1,200 spans`."""
    return f"{n:,} {plural(n, noun)}"
