"""On disk, the traces that left for the exporters with results still to follow.

A trace that leaves at `max_hold` before its scoring ended (`eval.<metric>.pending` on
its root) has left the write-ahead log too: with `file_storage` its spans as they were
scored and the names of its pending metrics are kept here until those results followed
or were given up, so that after a restart (SIGKILL or SIGTERM) it is scored again and
the pending results still follow on its carrier. One file, `pending_results.copies` in
the storage directory, of records framed as the log's (`records`): `P` a trace left
with results pending (trace id, its pending metrics' names, its spans as export
request bytes), `D` done (they followed, or were given up).

The file only grows between compactions: once it is more than twice the live records
(and `COMPACT_SLACK` over them), the live records, read back from the file, are written
to a new file that replaces it (`records.RecordFile`); `open` compacts too. Nothing is
held in memory but each live record's place in the file: the traces with results still
to follow are bounded by `max_following_traces`, and so is this file.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from spanscore.extensions.records import HEADER, RecordFile, framed

FILE_NAME = "pending_results.copies"
PENDING, DONE = b"P", b"D"
_PENDING = struct.Struct("<16sI")  # trace id, length of the metric names (JSON) after it
_DONE = struct.Struct("<16s")
COMPACT_SLACK = 1 << 20  # garbage tolerated before compacting, whatever the live size


@dataclass
class PendingCopy:
    trace_id: bytes
    pending: tuple[str, ...]  # the trace metrics whose results were to follow
    spans: bytes  # export request bytes of its spans, as they were scored


class PendingCopies:
    """Not thread-safe: used from the collector's event loop."""

    def __init__(self, directory: Path, fsync: str = "batch"):
        self.file = RecordFile(Path(directory) / FILE_NAME, fsync)
        self._live: dict[bytes, tuple[int, int]] = {}  # trace id -> (offset, length) of its `P` record
        self.live_bytes = 0

    @property
    def bytes_on_disk(self) -> int:
        return self.file.bytes_on_disk

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, trace_id: bytes) -> bool:
        return trace_id in self._live

    def open(self) -> list[PendingCopy]:
        """The traces whose results were still to follow at the last stop, first left
        first; the file is then rewritten with them only, ready to append."""
        live: dict[bytes, bytes] = {}
        for kind, _, payload in self.file.read((PENDING, DONE)):
            trace_id = payload[:16]
            live.pop(trace_id, None)  # left again: the later record is the one that counts
            if kind == PENDING:
                live[trace_id] = payload
        self._rewrite(list(live.values()))
        return [_pending_copy(payload) for payload in live.values()]

    def keep(self, trace_id: bytes, pending: tuple[str, ...], spans: bytes) -> None:
        names = json.dumps(pending).encode()
        record = framed(PENDING, _PENDING.pack(trace_id, len(names)) + names + spans)
        self.done(trace_id)
        self._live[trace_id] = (self.file.append(record), len(record))
        self.live_bytes += len(record)

    def done(self, trace_id: bytes) -> None:
        """Its results followed or were given up: it is not needed after a restart."""
        place = self._live.pop(trace_id, None)
        if place is None:
            return
        self.live_bytes -= place[1]
        self.file.append(framed(DONE, _DONE.pack(trace_id)))
        if self.file.bytes_on_disk > 2 * self.live_bytes + COMPACT_SLACK:
            self._rewrite(
                [
                    self.file.read_at(offset + HEADER.size, length - HEADER.size)
                    for offset, length in self._live.values()
                ]
            )

    def close(self) -> None:
        self.file.close()

    def _rewrite(self, payloads: list[bytes]) -> None:
        records = [framed(PENDING, payload) for payload in payloads]
        self.file.replace(records)
        self._live, offset = {}, 0
        for payload, record in zip(payloads, records):
            self._live[payload[:16]] = (offset, len(record))
            offset += len(record)
        self.live_bytes = offset


def _pending_copy(payload: bytes) -> PendingCopy:
    trace_id, names_length = _PENDING.unpack_from(payload)
    names = payload[_PENDING.size : _PENDING.size + names_length]
    return PendingCopy(trace_id, tuple(json.loads(names)), payload[_PENDING.size + names_length :])
