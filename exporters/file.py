"""`file` exporter: OTLP/JSON lines, one ExportTraceServiceRequest per line.

The format of the OpenTelemetry file exporter spec; the HTTP receiver accepts each line
as a `POST /v1/traces` body, so a file can be replayed into spanscore or a Collector.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from spanscore.core.component import ComponentFactory
from spanscore.core.export_request import build_request
from spanscore.core.otlp_json import encode_request
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig, ExportError, QueueConfig


class FileQueueConfig(QueueConfig):
    num_consumers: int = Field(default=1, ge=1, le=1)  # one writer, so lines never interleave


class FileExporterConfig(ExporterConfig):
    path: str = Field(min_length=1)
    append: bool = True  # false truncates the file at start
    sending_queue: FileQueueConfig = Field(default_factory=FileQueueConfig)


class FileExporter(Exporter):
    config: FileExporterConfig

    async def open(self) -> None:
        path = Path(self.config.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a" if self.config.append else "w", encoding="utf-8")
        except OSError as exc:
            raise OSError(f"file exporter {self.id}: cannot open {path}: {exc.strerror or exc}") from None

    async def send(self, traces: list[Trace]) -> None:
        line = encode_request(build_request(traces)) + "\n"
        try:
            await asyncio.to_thread(self._write, line)
        except OSError as exc:
            raise ExportError(f"{self.config.path}: {exc.strerror or exc}", retryable=True) from None

    def _write(self, line: str) -> None:
        self._file.write(line)
        self._file.flush()

    async def close(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


FACTORY = ComponentFactory("exporter", "file", FileExporterConfig, FileExporter)
