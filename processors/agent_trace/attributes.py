"""A span's attributes as the convention adapters read them.

`SpanAttributes` indexes a span's attribute keys once and converts a value only when it
is asked for (through `core.attributes.any_value_to_python`), so a trace is
normalized without turning every attribute of every span into Python objects.

Adapters first ask which keys sit under a prefix (`gen_ai.`, `langfuse.`, ...) and
which keys are present. The answers depend only on the keys, and spans from one
instrumentation carry the same keys over and over, so answers are kept per distinct key
tuple (`KeyShape`, with `KeyShape.fact` for whatever a reader derives from the keys
alone) and each span pays one dict lookup for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from spanscore.core.attributes import any_value_to_python
from spanscore.processors.agent_trace.content import unflatten

Prefixes = str | tuple[str, ...]

# Bounds on what is kept: distinct key tuples seen (the table starts over when full), and
# prefix answers per tuple (adapters ask a few constant prefixes; others are not kept).
MAX_SHAPES = 2048
MAX_ANSWERS_PER_SHAPE = 64


class KeyShape:
    """One ordered tuple of attribute keys: where each key first appears, the keys under
    each prefix asked about, and facts derived from the keys."""

    __slots__ = ("positions", "_under", "_facts")

    def __init__(self, keys: tuple[str, ...]):
        positions: dict[str, int] = {}
        for position, key in enumerate(keys):
            positions.setdefault(key, position)  # first wins, as in find_attribute
        self.positions = positions
        self._under: dict[Prefixes, tuple[str, ...]] = {}
        self._facts: dict[Callable[[KeyShape], Any], Any] = {}

    def fact(self, compute: Callable[[KeyShape], Any]) -> Any:
        """`compute(self)`, once per shape: what a reader decides from the keys alone."""
        facts = self._facts
        if compute in facts:
            return facts[compute]
        value = facts[compute] = compute(self)
        return value

    def under(self, prefixes: Prefixes) -> tuple[str, ...]:
        """Keys under `prefixes` (one prefix or a tuple of them), in attribute order."""
        found = self._under.get(prefixes)
        if found is None:
            found = tuple(key for key in self.positions if key.startswith(prefixes))
            if len(self._under) < MAX_ANSWERS_PER_SHAPE:
                self._under[prefixes] = found
        return found


_SHAPES: dict[tuple[str, ...], KeyShape] = {}


def key_shape(keys: tuple[str, ...]) -> KeyShape:
    shape = _SHAPES.get(keys)
    if shape is None:
        if len(_SHAPES) >= MAX_SHAPES:
            _SHAPES.clear()
        shape = _SHAPES[keys] = KeyShape(keys)
    return shape


class SpanAttributes:
    """Read-only, lazily converted view of an OTLP attribute list. Not thread-safe."""

    __slots__ = ("_attributes", "_positions", "_shape", "_cache")

    def __init__(self, attributes: Sequence[KeyValue]):
        # Only the keys are read here; an attribute's value is fetched by its position in
        # the list when it is asked for (attaching scores only appends to the list).
        self._attributes = attributes
        shape = self._shape = key_shape(tuple([kv.key for kv in attributes]))
        self._positions = shape.positions
        self._cache: dict[str, Any] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._positions

    def get(self, key: str, default: Any = None) -> Any:
        cache = self._cache
        if key in cache:
            return cache[key]
        position = self._positions.get(key)
        if position is None:
            return default
        value = cache[key] = any_value_to_python(self._attributes[position].value)
        return default if value is None else value

    def first(self, *keys: str) -> Any:
        for key in keys:
            value = self.get(key)
            if value is not None and value != "":
                return value
        return None

    def text(self, *keys: str) -> str | None:
        """The first present key as a string (scalars stringified, structures skipped)."""
        positions, cache = self._positions, self._cache
        for key in keys:
            if key in cache:
                value = cache[key]
            else:
                position = positions.get(key)
                if position is None:  # most keys asked for are absent
                    continue
                value = cache[key] = any_value_to_python(self._attributes[position].value)
            if isinstance(value, str):
                if value:
                    return value
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
        return None

    def shape_fact(self, compute: Callable[[KeyShape], Any]) -> Any:
        """`compute` of this span's key shape, computed once per shape (`KeyShape.fact`)."""
        return self._shape.fact(compute)

    def count_prefix(self, prefixes: Prefixes) -> int:
        """How many keys are under `prefixes` (one prefix or a tuple of them)."""
        return len(self._shape.under(prefixes))

    def has_prefix(self, prefixes: Prefixes) -> bool:
        """Whether any key is under `prefixes` (one prefix or a tuple of them)."""
        return bool(self._shape.under(prefixes))

    def with_prefix(self, prefix: str) -> dict[str, Any]:
        """Keys under `prefix` (stripped of it) with their values."""
        size = len(prefix)
        return {key[size:]: self.get(key) for key in self._shape.under(prefix)}

    def nested(self, prefix: str) -> Any:
        """Indexed keys under `prefix` (e.g. `gen_ai.prompt.`) nested into lists and dicts."""
        flat = self.with_prefix(prefix)
        return unflatten(flat) if flat else None
