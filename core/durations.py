"""Durations in config, written the way the OpenTelemetry Collector writes them.

`1s`, `500ms`, `2m`, `1h30m`, or a bare number meaning seconds. Held as float seconds.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

from spanscore.core.quoting import excerpt

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")


def parse_duration(value: object) -> float:
    """Seconds from a Go-style duration string or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 1s or 500ms")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError("expected a duration such as 1s or 500ms, got an empty string")
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                quoted = excerpt(repr(value))
                raise ValueError(f"{quoted} is not a duration; use forms like 1s, 500ms, 2m, 1h30m") from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise ValueError("expected a duration such as 1s or 500ms")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A config field holding seconds, accepting `1s`/`500ms`/numbers."""


def format_duration(seconds: float) -> str:
    """A duration the way config writes it (`10m`, `1m30s`, `2.5s`, `500ms`), for messages."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60:
        return f"{round(seconds, 1):g}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
