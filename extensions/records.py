"""The records file_storage's files are made of: kind (1 byte) | payload length (4) |
CRC-32 of the payload (4) | payload. A record is whole or, cut off by a crash mid-write,
found torn on reading (its length runs past the end, or its CRC does not match)."""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path

log = logging.getLogger("spanscore.file_storage")

HEADER = struct.Struct("<cII")  # kind, payload length, crc32


def framed(kind: bytes, payload: bytes) -> bytes:
    """One record: kind, length and CRC-32 of `payload`, then `payload`."""
    return HEADER.pack(kind, len(payload), zlib.crc32(payload)) + payload


def read_records(path: Path, kinds: tuple[bytes, ...], cut_off: bool) -> list[tuple[bytes, int, bytes]]:
    """The records of file `path` up to the first that is torn, corrupt or of no kind in
    `kinds`: (kind, offset, payload). What follows is ignored with a warning and, with
    `cut_off` (the file written last: the crash came mid-write), truncated away."""
    blob = path.read_bytes()
    records = []
    offset = 0
    while offset + HEADER.size <= len(blob):
        kind, length, crc = HEADER.unpack_from(blob, offset)
        end = offset + HEADER.size + length
        payload = blob[offset + HEADER.size : end]
        if end > len(blob) or zlib.crc32(payload) != crc or kind not in kinds:
            break
        records.append((kind, offset, payload))
        offset = end
    if offset < len(blob):
        where = "cut off at the end" if cut_off else "corrupt"
        log.warning(
            "file_storage %s: %d bytes after offset %d are %s; ignoring them",
            path.name,
            len(blob) - offset,
            offset,
            where,
        )
        if cut_off:
            with open(path, "r+b") as f:
                f.truncate(offset)
    return records
