"""Where in a YAML document a validation problem is: `processors.judge.trials`, `cases[2].turns[0]`.

The config and the eval-suite datasets both report every problem prefixed with its key
path, so a user can find it without reading a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable

from spanscore.core.quoting import excerpt

KEY_ITSELF = "[key]"  # the last part of pydantic's location of a problem with a key, not its value


def key_path(prefix: str, location: Iterable[str | int]) -> str:
    """`prefix` followed by pydantic's error location: list indexes in brackets, keys dotted
    (escaped and cut short, as `excerpt` quotes). A problem with a mapping's key itself
    (pydantic's `[key]`) is at that key's path."""
    path = prefix
    for part in location:
        if part != KEY_ITSELF:
            path += f"[{part}]" if isinstance(part, int) else f".{excerpt(str(part))}"  # a key as written
    return path
