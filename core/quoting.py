"""Quoting untrusted input in errors and logs: never whole, whatever its size."""

from __future__ import annotations

MAX_QUOTED_CHARS = 200


def excerpt(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """`text`, or its first `limit` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
