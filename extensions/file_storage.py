"""`file_storage` extension: where spanscore keeps what it must not lose, as in the Collector.

Listed in `service.extensions`, it turns on the write-ahead log: every accepted request
is on disk before the client is acknowledged, and whatever was acknowledged but not yet
exported by every exporter is replayed on the next start (see `write_ahead_log`). At
`max_size_mib` on disk, receivers answer "retry later" until exports catch up.

With `late_spans: rescore`, the copies of scored traces awaiting late spans are kept
here too (`rescore_copies`), so a restart inside a trace's late window still re-scores it;
so are the traces that left at `max_hold` with results still to follow
(`pending_copies`), so those results follow after a restart.

Exporters that name it in `sending_queue.storage` get a persistent sending queue in a
folder of their own under `directory/sending_queue/` (see `persistent_queue`), bounded
by `max_size_mib` too.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.extensions.pending_copies import PendingCopies, PendingCopy
from spanscore.extensions.persistent_queue import PersistentQueue
from spanscore.extensions.rescore_copies import KeptCopy, RescoreCopies
from spanscore.extensions.write_ahead_log import Replayed, WriteAheadLog

log = logging.getLogger("spanscore.file_storage")


class FileStorageConfig(ComponentConfig):
    directory: Path
    fsync: Literal["batch", "always", "never"] = "batch"
    max_size_mib: int = Field(default=1024, ge=1)
    segment_size_mib: int = Field(default=16, ge=1)

    @field_validator("fsync", mode="before")
    @classmethod
    def _collector_boolean(cls, value):
        # The Collector's file_storage takes `fsync: true|false` (every write, or never).
        if isinstance(value, bool):
            return "always" if value else "never"
        return value


class FileStorage:
    def __init__(self, component_id: str, config: FileStorageConfig):
        self.id = component_id
        self.config = config
        self.log = self._log(
            config.directory,
            RescoreCopies(config.directory, config.fsync),
            PendingCopies(config.directory, config.fsync),
        )
        self.replay: list[Replayed] = []
        self.kept_copies: list[KeptCopy] = []  # scored traces awaiting late spans at the last stop
        self.pending_copies: list[PendingCopy] = []  # traces whose results were to follow at the last stop
        self._queues: list[PersistentQueue] = []

    def _log(
        self, directory: Path, copies: RescoreCopies | None = None, pending: PendingCopies | None = None
    ) -> WriteAheadLog:
        config = self.config
        return WriteAheadLog(
            directory, config.fsync, config.max_size_mib << 20, config.segment_size_mib << 20, copies, pending
        )

    def queue_for(self, component_id: str) -> PersistentQueue:
        """The persistent sending queue of exporter `component_id` (opened by the exporter)."""
        folder = re.sub(r"[^A-Za-z0-9_.-]", "_", component_id)
        queue = PersistentQueue(self._log(self.config.directory / "sending_queue" / folder))
        self._queues.append(queue)
        return queue

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        try:
            self.replay = self.log.open()
            if self.log.copies is not None:
                self.kept_copies = self.log.copies.open()
            if self.log.pending is not None:
                self.pending_copies = self.log.pending.open()
        except OSError as exc:
            raise OSError(f"file_storage cannot use {self.config.directory}: {exc}") from exc
        if self.replay:
            log.warning(
                "write-ahead log %s: %d acknowledged requests were not exported by every exporter before "
                "the last stop; replaying them (%d spans already exported before the stop are not sent again)",
                self.config.directory,
                len(self.replay),
                self.log.skipped_exported_spans,
            )

    async def shutdown(self, deadline: float) -> None:
        self.log.close()
        for queue in self._queues:
            queue.close()


FACTORY = ComponentFactory("extension", "file_storage", FileStorageConfig, FileStorage)
