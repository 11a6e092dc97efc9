"""What an exporter's persistent sending queue offers it (the Collector's `sending_queue.storage`).

Provided by a storage extension (`file_storage`) and handed to the exporter by the
service, so exporters depend on this contract only. Items are encoded export requests,
taken in the order they were put; an item leaves the store only when acknowledged.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class SendingStorage(Protocol):
    def open(self) -> int:
        """Load what an earlier run left unsent; how many spans that is."""
        ...

    @property
    def full(self) -> bool:
        """No room for another item: the exporter keeps it in memory instead."""
        ...

    @property
    def queued_spans(self) -> int: ...

    def put(self, data: bytes, spans: int) -> int:
        """Store one encoded ExportTraceServiceRequest of `spans` spans; its number."""
        ...

    async def durable(self, number: int) -> None:
        """Return once item `number` is stored as durably as configured."""

    def take(self, max_spans: int) -> list[tuple[int, bytes, int]]:
        """The oldest items not taken yet, (number, data, spans), up to `max_spans` spans
        (at least one item when any waits)."""
        ...

    def give_back(self, items: list[tuple[int, bytes, int]]) -> None:
        """Items taken but not sent: first in line again."""

    def ack(self, number: int, spans: int) -> None:
        """Item `number` is done with (sent, or refused for good): it leaves the store."""

    def close(self) -> None: ...


@runtime_checkable
class SendingStorages(Protocol):
    """A storage extension (`file_storage`): each exporter's sending queue."""

    def queue_for(self, component_id: str) -> SendingStorage: ...
