"""A file as a crash mid-write leaves it: its last record cut short."""

from __future__ import annotations

from pathlib import Path


def tear_the_end(path: Path, cut: int = 5) -> None:
    """Cut the last `cut` bytes off `path`."""
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - cut)
