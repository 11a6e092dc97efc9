"""Equality of JSON-like values as JSON means it: what an expected value in a config or
a case file is compared with (a tool call's arguments, a span attribute's value)."""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values, type-sensitive where JSON has distinct types.

    - strings, booleans and null only equal their own kind: "5" != 5, True != 1,
      False != 0, None != 0 (Python's `True == 1` does not apply);
    - numbers compare by value: JSON has a single number type, so 1 == 1.0 (whether a
      producer wrote `1` or `1.0` is not a difference in the value). NaN, which JSON
      cannot carry, equals nothing;
    - arrays (lists or tuples) are equal when they have the same length and their items
      are equal in order; objects (mappings) when they have the same keys and the values
      under each key are equal.

    Anything else (a set, a custom object) falls back to `==` between values of the same
    type.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)) or a.keys() != b.keys():
            return False
        return all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))) or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
