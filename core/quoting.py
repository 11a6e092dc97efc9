"""Quoting untrusted input in errors, logs and terminal output: never whole, whatever its
size, and never able to start a line of its own or steer a terminal.

A client's text (a span name, a session id, a header) printed as it came could forge a
log line (`\\n2025-01-01 ERROR ...`), move the cursor or recolour the screen (ANSI escape
sequences), or hide what follows (bidirectional overrides). `excerpt` writes every such
character as an escape and cuts the text short.
"""

from __future__ import annotations

import re

MAX_QUOTED_CHARS = 200

# C0 and C1 control characters (LF, CR, ESC, NEL...), DEL, the Unicode line and
# paragraph separators, and the bidirectional marks, embeddings, overrides and isolates.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def excerpt(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """`text` with its control characters escaped (`\\n`, `\\x1b`, `\\u2028`), cut to its
    first `limit` characters with how long it was."""
    if len(text) > limit:
        return f"{_UNPRINTABLE.sub(_escaped, text[:limit])}... ({len(text)} characters)"
    return _UNPRINTABLE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
