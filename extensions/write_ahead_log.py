"""A segmented write-ahead log of received OTLP requests, and of what left for good.

Each accepted request is appended as a data record (its sequence number and protobuf
bytes) before the client is acknowledged; when a trace is done with, a mark record says
so (the request's sequence number, the trace id and how many of its spans that was).
A trace is done with once every exporter is, and, when it belongs to a session, once
that session closed too: until then an "exported" mark says only that it need not be
sent again. On start, `open` returns what was acknowledged and is not done with: those
requests without the traces done with, and with the ids of the traces only to score
again (to rebuild their open sessions), so a crash repeats as little as the marks allow.

Records (`records`): kind (1 byte) | payload length (4) | CRC-32 of the payload (4) | payload.
Segments are files `NNNNNNNNNNNNNNNNNNNN.wal` named by their first sequence number; one
is written to, the others are deleted once every request in them is done. A torn record
at the end of the last segment (the crash came mid-write) is cut off on start.

Durability of an acknowledged request, by `fsync` policy: `batch` (one fsync covers
every request written before it started: group commit), `always` (one fsync per
request), `never` (written to the operating system before acknowledging: survives the
process being killed, not the machine losing power).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from spanscore.core.telemetry import Readout, TelemetryMetric
from spanscore.extensions.pending_copies import PendingCopies
from spanscore.extensions.records import HEADER, framed, read_records
from spanscore.extensions.rescore_copies import RescoreCopies

log = logging.getLogger("spanscore.file_storage")

DATA, MARK, EXPORTED = b"D", b"M", b"E"
_DATA = struct.Struct("<QI")  # sequence number, accepted spans
_MARK = struct.Struct("<QI16s")  # request sequence number, spans, trace id
SUFFIX = ".wal"

WRITTEN_REQUESTS = TelemetryMetric(
    "spanscore_write_ahead_requests",
    "{request}",
    "Requests written to the write-ahead log before their answer",
    "counter",
)
PENDING_REQUESTS = TelemetryMetric(
    "spanscore_write_ahead_pending_requests",
    "{request}",
    "Requests in the write-ahead log not yet exported by every exporter",
    "gauge",
)
BYTES_ON_DISK = TelemetryMetric("spanscore_write_ahead_size", "By", "Bytes of write-ahead log on disk", "gauge")
MAX_BYTES = TelemetryMetric(
    "spanscore_write_ahead_size_limit", "By", "The write-ahead log size past which requests are refused", "gauge"
)


@dataclass
class _Request:
    segment: int  # first sequence number of its segment
    spans: int  # accepted spans not yet exported for good
    offset: int  # where its protobuf bytes start in the segment file
    length: int


@dataclass
class Replayed:
    sequence: int
    data: bytes
    exported_traces: set[bytes]  # trace ids of this request done with: skip their spans
    rescore_traces: set[bytes] = field(default_factory=set)  # exported, their session open: score, do not send


class WriteAheadLog:
    """Not thread-safe: used from the collector's event loop (fsync runs in a thread)."""

    def __init__(
        self,
        directory: Path,
        fsync: str = "batch",
        max_bytes: int = 1 << 30,
        segment_bytes: int = 16 << 20,
        copies: RescoreCopies | None = None,
        pending: PendingCopies | None = None,
    ):
        self.directory = Path(directory)
        # Scored traces' copies kept for late spans (rescore_copies): not requests, but
        # on the same disk budget.
        self.copies = copies
        self.pending = pending  # traces that left with results to follow (pending_copies): the same
        self.fsync = fsync
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._requests: dict[int, _Request] = {}
        self._segment_pending: dict[int, int] = {}  # segment -> requests not done
        self._segment_sizes: dict[int, int] = {}
        self._next = 0
        self._segment = -1
        self._fd = -1
        self._synced_through = -1  # highest sequence number known durable
        self._sync_task: asyncio.Task | None = None
        self._sync_waiters: list[tuple[int, asyncio.Future]] = []
        self.segments_on_disk = 0
        self.written_requests = 0
        self.replayed_requests = 0
        # Spans the log held marked exported at `open` (done with, or kept to rebuild an
        # open session), which are not sent again; those of requests whose segment was
        # deleted, all done with, are no longer on disk to count.
        self.skipped_exported_spans = 0

    # Start -----------------------------------------------------------------------------

    def open(self, payloads: bool = True) -> list[Replayed]:
        """Read what is on disk; return the requests to replay, in order. Then ready to append.

        With `payloads=False` their bytes stay on disk (`Replayed.data` is empty; `read`
        fetches them), so a backlog of any size opens in memory for its index only.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        data: dict[int, tuple[int, int, bytes, int, int]] = {}
        marks: dict[int, list[tuple[int, bytes]]] = {}
        unsettled: dict[int, dict[bytes, int]] = {}  # exported, session not closed: trace id -> spans
        segments = sorted(int(p.stem) for p in self.directory.glob(f"*{SUFFIX}") if p.stem.isdigit())
        for index, segment in enumerate(segments):
            path = self._path(segment)
            size = self._read_segment(path, data, marks, unsettled, last=index == len(segments) - 1, payloads=payloads)
            self._segment_sizes[segment] = size
            self._segment_pending[segment] = 0
            self.segments_on_disk += size
        replay: list[Replayed] = []
        for sequence in sorted(data):
            segment, spans_total, payload, offset, length = data[sequence]
            exported = marks.get(sequence, [])
            done = sum(n for n, _ in exported)
            if done >= spans_total:
                self.skipped_exported_spans += done
                continue
            exported_ids = {trace_id for _, trace_id in exported}
            rescore = {t: n for t, n in unsettled.get(sequence, {}).items() if t not in exported_ids}
            self._requests[sequence] = _Request(segment, spans_total - done, offset, length)
            self._segment_pending[segment] += 1
            replay.append(Replayed(sequence, payload, exported_ids, set(rescore)))
            self.skipped_exported_spans += done + sum(rescore.values())
        self._next = max([*data, *marks, *unsettled, -1]) + 1
        for segment in segments:
            if self._segment_pending[segment] == 0:
                self._delete(segment)
        self._open_segment()
        self.replayed_requests = len(replay)
        return replay

    def _read_segment(self, path: Path, data, marks, unsettled, last: bool, payloads: bool) -> int:
        segment = int(path.stem)
        for kind, offset, payload in read_records(path, (DATA, MARK, EXPORTED), cut_off=last):
            if kind == DATA:
                sequence, spans = _DATA.unpack_from(payload)
                start = offset + HEADER.size + _DATA.size
                data[sequence] = (
                    segment,
                    spans,
                    payload[_DATA.size :] if payloads else b"",
                    start,
                    len(payload) - _DATA.size,
                )
            elif kind == MARK:
                sequence, spans, trace_id = _MARK.unpack(payload)
                marks.setdefault(sequence, []).append((spans, trace_id))
            else:
                sequence, spans, trace_id = _MARK.unpack(payload)
                unsettled.setdefault(sequence, {})[trace_id] = spans  # marked again after a replay: once
        return path.stat().st_size

    # Appending -------------------------------------------------------------------------

    @property
    def bytes_on_disk(self) -> int:
        kept = [files.bytes_on_disk for files in (self.copies, self.pending) if files is not None]
        return self.segments_on_disk + sum(kept)

    @property
    def full(self) -> bool:
        return self.bytes_on_disk >= self.max_bytes

    @property
    def next_sequence(self) -> int:
        """The sequence number the next `append` writes under."""
        return self._next

    def append(self, data: bytes, spans: int) -> int:
        """Write one accepted request of `spans` spans; its sequence number."""
        sequence = self._next
        self._next += 1
        if self._segment_sizes[self._segment] >= self.segment_bytes:
            self._rotate()
        payload = _DATA.pack(sequence, spans) + data
        start = self._segment_sizes[self._segment] + HEADER.size + _DATA.size
        self._write(DATA, payload)
        self._requests[sequence] = _Request(self._segment, spans, start, len(data))
        self._segment_pending[self._segment] += 1
        self.written_requests += 1
        return sequence

    def adopt(self, sequence: int, spans: int) -> None:
        """A replayed request holds `spans` spans again (some may have been rejected)."""
        request = self._requests.get(sequence)
        if request is not None:
            request.spans = spans
            if spans == 0:
                self._finish(sequence, request)

    async def durable(self, sequence: int) -> None:
        """Return once request `sequence` is as durable as the fsync policy promises."""
        if self.fsync == "never" or sequence <= self._synced_through:
            return
        if self.fsync == "always":
            await asyncio.to_thread(os.fsync, self._fd)
            self._synced_through = max(self._synced_through, sequence)
            return
        future = asyncio.get_running_loop().create_future()
        self._sync_waiters.append((sequence, future))
        if self._sync_task is None:
            self._sync_task = asyncio.create_task(self._sync_forever())
        await future

    async def _sync_forever(self) -> None:
        try:
            while self._sync_waiters:
                waiters, self._sync_waiters = self._sync_waiters, []
                through = max(s for s, _ in waiters)
                try:
                    await asyncio.to_thread(os.fsync, self._fd)
                except OSError as exc:
                    for _, future in waiters:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self._synced_through = max(self._synced_through, through)
                for _, future in waiters:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._sync_task = None

    def exported(self, sequence: int, trace_id: bytes, spans: int) -> None:
        """Every exporter is done with `spans` spans of trace `trace_id` from request
        `sequence`, whose session is still open: not to be sent again, but kept until
        `done` to rebuild the session after a crash."""
        if sequence in self._requests:
            self._write(EXPORTED, _MARK.pack(sequence, spans, trace_id))

    def done(self, sequence: int, trace_id: bytes, spans: int) -> None:
        """`spans` spans of trace `trace_id` from request `sequence` are done with for good."""
        request = self._requests.get(sequence)
        if request is None:
            return
        self._write(MARK, _MARK.pack(sequence, spans, trace_id))
        request.spans -= spans
        if request.spans <= 0:
            self._finish(sequence, request)

    def _finish(self, sequence: int, request: _Request) -> None:
        del self._requests[sequence]
        segment = request.segment
        self._segment_pending[segment] -= 1
        if self._segment_pending[segment] == 0 and segment != self._segment:
            self._delete(segment)

    def spans_pending(self, sequence: int) -> int:
        """Spans of request `sequence` not yet exported."""
        return self._requests[sequence].spans

    def read(self, sequence: int) -> bytes:
        """The protobuf bytes of pending request `sequence`, read back from its segment."""
        request = self._requests[sequence]
        fd = os.open(self._path(request.segment), os.O_RDONLY)
        try:
            return os.pread(fd, request.length, request.offset)
        finally:
            os.close(fd)

    @property
    def pending_requests(self) -> int:
        return len(self._requests)

    def telemetry(self) -> list[Readout]:
        return [
            WRITTEN_REQUESTS.reads(lambda: self.written_requests),
            PENDING_REQUESTS.reads(lambda: self.pending_requests),
            BYTES_ON_DISK.reads(lambda: self.bytes_on_disk),
            MAX_BYTES.reads(lambda: self.max_bytes),
        ]

    def close(self) -> None:
        for files in (self.copies, self.pending):
            if files is not None:
                files.close()
        if self._fd >= 0:
            if self.fsync != "never":
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    # Files -----------------------------------------------------------------------------

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:020d}{SUFFIX}"

    def _write(self, kind: bytes, payload: bytes) -> None:
        record = framed(kind, payload)
        os.write(self._fd, record)
        self._segment_sizes[self._segment] += len(record)
        self.segments_on_disk += len(record)

    def _open_segment(self) -> None:
        self._segment = self._next
        self._fd = os.open(self._path(self._segment), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._segment_sizes.setdefault(self._segment, 0)
        self._segment_pending.setdefault(self._segment, 0)

    def _rotate(self) -> None:
        previous = self._segment
        if self.fsync != "never":
            os.fsync(self._fd)
        os.close(self._fd)
        self._open_segment()
        if self._segment_pending[previous] == 0:
            self._delete(previous)

    def _delete(self, segment: int) -> None:
        self._path(segment).unlink(missing_ok=True)
        self.segments_on_disk -= self._segment_sizes.pop(segment, 0)
        self._segment_pending.pop(segment, None)
