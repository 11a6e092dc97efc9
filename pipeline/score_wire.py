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


def varint(number: int) -> bytes:
    """`number` as a protobuf varint (an unsigned one; int64 values are masked first)."""
    if number < 0x80:
        return _ONE_BYTE[number]
    out = bytearray()
    while number >= 0x80:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]
# Tags of the length-delimited fields written here (wire type 2).
_STRING_VALUE = b"\x0a"  # AnyValue.string_value = 1; also KeyValue.key = 1
_VALUE = b"\x12"  # KeyValue.value = 2; also Span.Event.name = 2
_EVENT_ATTRIBUTE = b"\x1a"  # Span.Event.attributes = 3
_ATTRIBUTE = b"\x4a"  # Span.attributes = 9
_EVENT = b"\x5a"  # Span.events = 11
# Keys repeat (a metric's few attribute names, the event's): encoded once each.
_KEYS: dict[str, bytes] = {}
MAX_CACHED_KEYS = 4096


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """Field `tag` (one byte: a field number below 16, wire type 2) holding `payload`."""
    size = len(payload)
    return tag + (_ONE_BYTE[size] if size < 0x80 else varint(size)) + payload


def _text(value: str) -> bytes:
    # A lone surrogate (from mangled JSON) cannot be UTF-8: replaced, as protobuf needs valid text.
    return value.encode("utf-8", "replace")


def any_value(value: Value) -> bytes:
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value & _INT64_MASK)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    return length_delimited(_STRING_VALUE, _text(value))


def key_value(key: str, value: Value) -> bytes:
    encoded = _KEYS.get(key)
    if encoded is None:
        if len(_KEYS) >= MAX_CACHED_KEYS:
            _KEYS.clear()
        encoded = _KEYS[key] = length_delimited(_STRING_VALUE, _text(key))
    # The common value types inline: a scored trace writes dozens of these, and each call
    # saved is a measurable share of attaching (the others go through any_value).
    if type(value) is str:
        text = value.encode("utf-8", "replace")
        size = len(text)
        wrapped = _STRING_VALUE + (_ONE_BYTE[size] if size < 0x80 else varint(size)) + text
    elif type(value) is float:
        wrapped = b"\x21" + _DOUBLE(value)
    else:
        wrapped = any_value(value)
    size = len(wrapped)
    return encoded + _VALUE + (_ONE_BYTE[size] if size < 0x80 else varint(size)) + wrapped


def span_attributes(pairs: Iterable[tuple[str, Value]]) -> bytes:
    """Span field bytes that append these attributes."""
    return b"".join([length_delimited(_ATTRIBUTE, key_value(key, value)) for key, value in pairs])


def span_event(time_unix_nano: int, name: str, pairs: Iterable[tuple[str, Value]]) -> bytes:
    """Span field bytes that append one event."""
    body = [b"\x09" + _FIXED64(time_unix_nano) + length_delimited(_VALUE, _text(name))]
    body += [length_delimited(_EVENT_ATTRIBUTE, key_value(key, value)) for key, value in pairs]
    return length_delimited(_EVENT, b"".join(body))
