"""Where each span of a received request sits in the request's bytes.

Handing a trace to a scoring worker means sending its spans as bytes. Serializing each
span again costs about 2 us (more than parsing it did); the request's own bytes already
hold every span, resource and scope as sent. One pass over the request's outer fields
(its resource spans, their scope spans, their spans; nothing inside a span is read)
finds them, so a span is handed on as a slice of what arrived.

Only bytes the protobuf parser accepted are walked, but the walk still checks what it
relies on: a resource or scope given once, and as many spans per scope as were parsed.
Anything else (a field split in parts, groups) leaves that request to serialization.
"""

from __future__ import annotations

from collections.abc import Sequence

# ResourceSpans and ScopeSpans: field 1 (resource / scope) and 2 (scope_spans / spans),
# both length-delimited; the request's resource_spans is its field 1.
_FIRST = 0x0A
_SECOND = 0x12

# A scope's bytes (None: absent), and its spans' start and end offsets, in turn.
Scope = tuple[bytes | None, tuple[int, ...]]


class WireError(ValueError):
    """The bytes are not laid out as the walk expects."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def _skip(data: bytes, pos: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(data, pos)[1]
    if wire_type == 1:
        return pos + 8
    if wire_type == 2:
        length, pos = _varint(data, pos)
        return pos + length
    if wire_type == 5:
        return pos + 4
    raise WireError(f"wire type {wire_type}")


class RequestWire:
    """A received ExportTraceServiceRequest's bytes and, once asked, its spans' places."""

    __slots__ = ("data", "_resources")

    def __init__(self, data: bytes):
        self.data = data
        # Per resource spans: its resource's bytes and, per scope spans, its scope's
        # bytes and its spans' offsets. False until walked, None once the walk failed.
        self._resources: list[tuple[bytes | None, list[Scope]]] | None | bool = False

    def origin(
        self, resource_index: int, scope_index: int, span_count: int
    ) -> tuple[bytes, bytes, Sequence[bytes]] | None:
        """The resource's, the scope's and every span's bytes of one scope spans, or None
        when they cannot be sliced (the caller serializes)."""
        resources = self._resources
        if resources is False:
            try:
                resources = self._resources = self._walk()
            except (WireError, IndexError):
                resources = self._resources = None
        if resources is None or resource_index >= len(resources):
            return None
        resource, scopes = resources[resource_index]
        if scope_index >= len(scopes):
            return None
        scope, offsets = scopes[scope_index]
        if len(offsets) != 2 * span_count:
            return None
        return resource or b"", scope or b"", _Slices(self.data, offsets)

    def _walk(self) -> list[tuple[bytes | None, list[Scope]]]:
        data = self.data
        resources = []
        pos, end = 0, len(data)
        while pos < end:
            key, pos = _varint(data, pos)
            if key == _FIRST:
                length, pos = _varint(data, pos)
                resources.append(self._resource_spans(pos, pos + length))
                pos += length
            else:
                pos = _skip(data, pos, key & 7)
        if pos != end:
            raise WireError("truncated")
        return resources

    def _resource_spans(self, pos: int, end: int) -> tuple[bytes | None, list[Scope]]:
        data = self.data
        resource = None
        scopes = []
        while pos < end:
            key, pos = _varint(data, pos)
            if key == _FIRST or key == _SECOND:
                length, pos = _varint(data, pos)
                if key == _SECOND:
                    scopes.append(self._scope_spans(pos, pos + length))
                elif resource is None:
                    resource = data[pos : pos + length]
                else:
                    raise WireError("resource in parts")
                pos += length
            else:
                pos = _skip(data, pos, key & 7)
        if pos != end:
            raise WireError("resource spans overrun")
        return resource, scopes

    def _scope_spans(self, pos: int, end: int) -> Scope:
        data = self.data
        scope = None
        offsets: list[int] = []
        append = offsets.append
        while pos < end:
            key = data[pos]
            pos += 1
            if key == _SECOND:  # a span: the hot path, one per span (its length inlined
                byte = data[pos]  # for spans under 16 KiB: one or two bytes)
                if byte < 0x80:
                    length = byte
                    pos += 1
                elif data[pos + 1] < 0x80:
                    length = (byte & 0x7F) | (data[pos + 1] << 7)
                    pos += 2
                else:
                    length, pos = _varint(data, pos)
                append(pos)
                pos += length
                append(pos)
            elif key == _FIRST:
                length, pos = _varint(data, pos)
                if scope is not None:
                    raise WireError("scope in parts")
                scope = data[pos : pos + length]
                pos += length
            else:
                if key >= 0x80:  # a field number above 15: a longer key
                    key, pos = _varint(data, pos - 1)
                pos = _skip(data, pos, key & 7)
        if pos != end:
            raise WireError("scope spans overrun")
        return scope, tuple(offsets)


class _Slices(Sequence[bytes]):
    """Span bytes by position, sliced when asked."""

    __slots__ = ("_data", "_offsets")

    def __init__(self, data: bytes, offsets: tuple[int, ...]):
        self._data = data
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) // 2

    def __getitem__(self, position: int) -> bytes:  # type: ignore[override]
        offsets = self._offsets
        return self._data[offsets[2 * position] : offsets[2 * position + 1]]
