"""Reading OTLP attribute values without turning whole spans into dicts.

Metrics and the assembler read a handful of keys per span; converting every attribute
of every span to Python objects is what caps throughput, so lookups here stop at the
first match and convert only the value asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def any_value_to_python(value: AnyValue) -> Any:
    """Convert one OTLP AnyValue to str, bool, int, float, bytes, list, dict or None."""
    text = value.string_value  # most values are strings: skip asking which kind is set
    if text:
        return text
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value_to_python(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value_to_python(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def find_attribute(attributes: Iterable[KeyValue], key: str) -> Any:
    """The Python value of `key` in an OTLP attribute list, or None when absent."""
    for kv in attributes:
        if kv.key == key:
            return any_value_to_python(kv.value)
    return None


def attributes_to_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """All attributes as a dict; for the few spans a metric reads in full."""
    return {kv.key: any_value_to_python(kv.value) for kv in attributes}
