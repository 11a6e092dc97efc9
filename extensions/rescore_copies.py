"""On disk, the copies of scored traces kept to score them again when late spans arrive.

With `file_storage`, a trace scored and exported leaves the write-ahead log, but its
copy (the spans as scored, and late spans added since, as export request bytes) is
kept here for its late window, so a restart inside it still re-scores. One file,
`late_spans.copies` in the storage directory, of records framed as the log's
(`records`): `K` a trace's copy kept (trace id, when its window ends in
Unix seconds, its sequence, its spans), `A` late spans added by a re-score (trace id,
the re-score's sequence, the spans), `F` the copy forgotten (window over, the memory
bound, max_rescores, not scored). Only what a re-score needs is kept: the spans' bytes,
not the requests they came in.

The file only grows between compactions: once it is more than twice the live copies (and
`COMPACT_SLACK` over them), the live copies are written to a new file, which replaces it
(`records.RecordFile`). `open` reads the file
(a torn record at its end, the crash came mid-write, is cut off with a warning), drops
what is past its window and compacts. What a copy holds is in memory too
(late_rescores): the bound on kept spans (`late_memory_spans`) bounds this file.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spanscore.extensions.records import RecordFile, framed

FILE_NAME = "late_spans.copies"
KEEP, ADD, FORGET = b"K", b"A", b"F"
_KEEP = struct.Struct("<16sdI")  # trace id, window end (Unix seconds), sequence
_ADD = struct.Struct("<16sI")  # trace id, sequence
_FORGET = struct.Struct("<16s")
COMPACT_SLACK = 1 << 20  # garbage tolerated before compacting, whatever the live size


@dataclass
class KeptCopy:
    trace_id: bytes
    expires_at: float  # Unix seconds
    sequence: int  # of its latest scoring
    parts: list[bytes] = field(default_factory=list)  # export request bytes: its spans, then each late batch


class RescoreCopies:
    """Not thread-safe: used from the collector's event loop."""

    def __init__(self, directory: Path, fsync: str = "batch"):
        self.file = RecordFile(Path(directory) / FILE_NAME, fsync)
        self._live: dict[bytes, int] = {}  # trace id -> bytes of its records
        self.live_bytes = 0

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def bytes_on_disk(self) -> int:
        return self.file.bytes_on_disk

    def open(self, now: float | None = None) -> list[KeptCopy]:
        """The copies on disk whose window has not ended at `now` (Unix seconds), first
        kept first; the file is then rewritten with them only, ready to append."""
        now = time.time() if now is None else now
        copies: dict[bytes, KeptCopy] = {}
        for kind, _, payload in self.file.read((KEEP, ADD, FORGET)):
            if kind == KEEP:
                trace_id, expires_at, sequence = _KEEP.unpack_from(payload)
                copies[trace_id] = KeptCopy(trace_id, expires_at, sequence, [payload[_KEEP.size :]])
            elif kind == ADD:
                trace_id, sequence = _ADD.unpack_from(payload)
                copy = copies.get(trace_id)
                if copy is not None:
                    copy.sequence = sequence
                    copy.parts.append(payload[_ADD.size :])
            else:
                copies.pop(_FORGET.unpack(payload)[0], None)
        kept = [copy for copy in copies.values() if copy.expires_at > now]
        self.compact(kept)
        return kept

    def keep(self, trace_id: bytes, expires_at: float, sequence: int, data: bytes) -> None:
        self._append(trace_id, KEEP, _KEEP.pack(trace_id, expires_at, sequence) + data)

    def add(self, trace_id: bytes, sequence: int, data: bytes) -> None:
        """Late spans of a kept trace, re-scored with sequence `sequence`."""
        if trace_id in self._live:
            self._append(trace_id, ADD, _ADD.pack(trace_id, sequence) + data)

    def forget(self, trace_id: bytes) -> None:
        size = self._live.pop(trace_id, None)
        if size is not None:
            self.live_bytes -= size
            self.file.append(framed(FORGET, _FORGET.pack(trace_id)))

    @property
    def wants_compaction(self) -> bool:
        return self.file.bytes_on_disk > 2 * self.live_bytes + COMPACT_SLACK

    def compact(self, copies: Iterable[KeptCopy]) -> None:
        """Replace the file with one holding `copies` only (each as one `K` record)."""
        live: dict[bytes, int] = {}
        records = []
        for copy in copies:
            record = framed(KEEP, _KEEP.pack(copy.trace_id, copy.expires_at, copy.sequence) + b"".join(copy.parts))
            records.append(record)
            live[copy.trace_id] = len(record)
        self.file.replace(records)
        self._live = live
        self.live_bytes = sum(live.values())

    def close(self) -> None:
        self.file.close()

    def _append(self, trace_id: bytes, kind: bytes, payload: bytes) -> None:
        record = framed(kind, payload)
        self.file.append(record)
        self._live[trace_id] = self._live.get(trace_id, 0) + len(record)
        self.live_bytes += len(record)
