"""Building the SDK parts (metric readers, log exporters) the telemetry pipelines hold."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spanscore.core.component import Host


def create_all(creators: Sequence[Callable[[Host], Any]], host: Host) -> list[Any]:
    """Each creator's part; when one fails, those already made are shut down first, so
    no reader keeps a port or a thread open after a failed start."""
    parts: list[Any] = []
    try:
        for create in creators:
            parts.append(create(host))
    except BaseException:
        for part in parts:
            part.shutdown()
        raise
    return parts
