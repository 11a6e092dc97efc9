"""The records file_storage's files are made of: kind (1 byte) | payload length (4) |
CRC-32 of the payload (4) | payload. A record is whole or, cut off by a crash mid-write,
found torn on reading (its length runs past the end, or its CRC does not match).
`RecordFile` is such a file that is appended to and compacted by replacing it."""

from __future__ import annotations

import logging
import os
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


class RecordFile:
    """An append-only file of records that is replaced whole, by rename, when compacted:
    a crash leaves the old file or the new one whole. Not thread-safe."""

    def __init__(self, path: Path, fsync: str = "batch"):
        self.path = path
        self.fsync = fsync
        self.bytes_on_disk = 0
        self._fd = -1

    def read(self, kinds: tuple[bytes, ...]) -> list[tuple[bytes, int, bytes]]:
        """Its records (`read_records`, a torn tail cut off); none when there is no file."""
        return read_records(self.path, kinds, cut_off=True) if self.path.exists() else []

    def append(self, record: bytes) -> int:
        """Write `record` at the end; where it starts."""
        offset = self.bytes_on_disk
        os.write(self._fd, record)
        self.bytes_on_disk += len(record)
        return offset

    def read_at(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def replace(self, records: list[bytes]) -> None:
        """The file now holds `records` only, in order, and is open for appending."""
        temporary = self.path.with_name(self.path.name + ".new")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"".join(records))
            if self.fsync != "never":
                os.fsync(fd)
        finally:
            os.close(fd)
        self.close()
        os.replace(temporary, self.path)
        if self.fsync != "never":
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        self.bytes_on_disk = sum(len(record) for record in records)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND, 0o600)

    def close(self) -> None:
        if self._fd >= 0:
            if self.fsync != "never":
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
