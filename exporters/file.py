"""`file` exporter: OTLP/JSON lines, one ExportTraceServiceRequest per line.

The format of the OpenTelemetry file exporter spec; the HTTP receiver accepts each line
as a `POST /v1/traces` body, so a file can be replayed into spanscore or a Collector.
In the logs pipeline it writes the evaluation events, one ExportLogsServiceRequest per
line, to `logs_path` (default: `path` with `.logs` before its suffix), so the traces file
stays readable by `spanscore score` and `report`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from pydantic import Field

from spanscore.core.component import NO_EXTENSIONS, ComponentFactory, Host
from spanscore.core.export_request import build_request
from spanscore.core.otlp_json import encode_logs_request, encode_request
from spanscore.core.trace import Trace
from spanscore.exporters.base import Exporter, ExporterConfig, ExportError, QueueConfig


class FileQueueConfig(QueueConfig):
    num_consumers: int = Field(default=1, ge=1, le=1)  # one writer, so lines never interleave


class FileExporterConfig(ExporterConfig):
    path: str = Field(min_length=1)
    logs_path: str | None = Field(default=None, min_length=1)
    append: bool = True  # false truncates the file at start
    # Configs are frozen, so a narrower queue config cannot be swapped for a wider one.
    sending_queue: FileQueueConfig = Field(default_factory=FileQueueConfig)  # pyright: ignore[reportIncompatibleVariableOverride]

    @property
    def resolved_logs_path(self) -> Path:
        if self.logs_path:
            return Path(self.logs_path)
        path = Path(self.path)
        return path.with_name(f"{path.stem}.logs{path.suffix or '.jsonl'}")


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


class FileLogExporter(LogRecordExporter):
    """Evaluation events as OTLP/JSON lines; called from the SDK's batch thread."""

    def __init__(self, component_id: str, config: FileExporterConfig, host: Host = NO_EXTENSIONS):
        path = config.resolved_logs_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a" if config.append else "w", encoding="utf-8")
        except OSError as exc:
            raise OSError(f"file exporter {component_id}: cannot open {path}: {exc.strerror or exc}") from None
        self._lock = threading.Lock()

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        line = encode_logs_request(encode_logs(batch)) + "\n"
        with self._lock:
            if self._file.closed:
                return LogRecordExportResult.FAILURE
            self._file.write(line)
            self._file.flush()
        return LogRecordExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()


FACTORY = ComponentFactory("exporter", "file", FileExporterConfig, FileExporter, create_log_exporter=FileLogExporter)
