"""An exporter's sending queue on disk: a write-ahead log read back in order.

Each item is one encoded export request, appended to a `WriteAheadLog` of its own
directory; an acknowledged item is marked done there, so segments go once all their
items are sent, and what is left at a stop is sent after the next start, oldest first.
Only the sequence numbers wait in memory; the bytes are read back when sent.
"""

from __future__ import annotations

from collections import deque

from spanscore.extensions.write_ahead_log import WriteAheadLog

_WHOLE_ITEM = b"\0" * 16  # marks name a trace; an item is acknowledged whole


class PersistentQueue:
    def __init__(self, log: WriteAheadLog):
        self.log = log
        self._waiting: deque[tuple[int, int]] = deque()  # (number, spans), oldest first
        self.queued_spans = 0

    def open(self) -> int:
        for item in self.log.open(payloads=False):  # read back one by one as they are sent
            spans = self.log.spans_pending(item.sequence)
            self._waiting.append((item.sequence, spans))
            self.queued_spans += spans
        return self.queued_spans

    @property
    def full(self) -> bool:
        return self.log.full

    def put(self, data: bytes, spans: int) -> int:
        number = self.log.append(data, spans)
        self._waiting.append((number, spans))
        self.queued_spans += spans
        return number

    async def durable(self, number: int) -> None:
        await self.log.durable(number)

    def take(self, max_spans: int) -> list[tuple[int, bytes, int]]:
        items: list[tuple[int, bytes, int]] = []
        total = 0
        while self._waiting and (not items or total + self._waiting[0][1] <= max_spans):
            number, spans = self._waiting.popleft()
            items.append((number, self.log.read(number), spans))
            total += spans
        return items

    def give_back(self, items: list[tuple[int, bytes, int]]) -> None:
        self._waiting.extendleft((number, spans) for number, _, spans in reversed(items))

    def ack(self, number: int, spans: int) -> None:
        self.log.done(number, _WHOLE_ITEM, spans)
        self.queued_spans -= spans

    def close(self) -> None:
        self.log.close()
