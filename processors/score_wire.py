"""Score attributes and evaluation events as protobuf wire bytes, merged into a span at once.

Writing a trace's scores as Python `KeyValue` and `Span.Event` messages costs a
constructor call per message and a copy of each into the span; it was the largest part
of attaching results, which runs on every scored trace. Encoded as the span's own
repeated fields instead, they are appended by one `MergeFromString` (merging appends
repeated fields). The encoding follows the OTLP protos: Span {9: attributes, 11:
events}, Span.Event {1: time_unix_nano (fixed64), 2: name, 3: attributes}, KeyValue
{1: key, 2: value}, AnyValue {1: string, 2: bool, 3: int64, 4: double}.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

Value = str | bool | int | float

_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_INT64_MASK = (1 << 64) - 1  # negative int64 values are written as their two's complement

SPAN_ATTRIBUTES = 9
SPAN_EVENTS = 11


def _varint(number: int) -> bytes:
    if number < 0x80:
        return bytes((number,))
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _text(value: str) -> bytes:
    # A lone surrogate (from mangled JSON) cannot be UTF-8: replaced, as protobuf needs valid text.
    return value.encode("utf-8", "replace")


def any_value(value: Value) -> bytes:
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & _INT64_MASK)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    return _length_delimited(1, _text(value))


def key_value(key: str, value: Value) -> bytes:
    return _length_delimited(1, _text(key)) + _length_delimited(2, any_value(value))


def span_attributes(pairs: Iterable[tuple[str, Value]]) -> bytes:
    """Span field bytes that append these attributes."""
    return b"".join(_length_delimited(SPAN_ATTRIBUTES, key_value(key, value)) for key, value in pairs)


def span_event(time_unix_nano: int, name: str, pairs: Iterable[tuple[str, Value]]) -> bytes:
    """Span field bytes that append one event."""
    body = b"\x09" + _FIXED64(time_unix_nano) + _length_delimited(2, _text(name))
    body += b"".join(_length_delimited(3, key_value(key, value)) for key, value in pairs)
    return _length_delimited(SPAN_EVENTS, body)
