"""Reading recorded OTLP/JSON files: the `file` exporter's lines, one request per file, gzip.

Used by `spanscore inspect` and `spanscore score`. A file is read as JSON lines when its
first non-blank line is a JSON document on its own; otherwise the whole file is one
document (a pretty-printed request, as `examples/` holds). A gzip file (by its magic
bytes, whatever its name) is read the same way once inflated. A broken line is reported
with its file and line number and reading goes on: one bad line never costs the others.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_json import OtlpJsonError, decode_request

_GZIP_MAGIC = b"\x1f\x8b"


def read_requests(
    path: Path, problems: list[str], consumed: Callable[[int], None] | None = None
) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
    """(where, request) for every request in `path`; problems are appended, not raised.

    Read as bytes and decoded per line, so a line with broken UTF-8 is one broken line.
    `consumed`, when given, hears how many bytes of the file on disk (compressed, for
    gzip) have been read after each request: a progress bar's position.
    """
    try:
        with path.open("rb") as raw, _decompressed(raw) as f:
            first = next((line for line in f if line.strip()), None)
            if first is None:
                return
            f.seek(0)
            if _is_document(first):
                yield from _json_lines(path, f, problems, lambda: consumed(raw.tell()) if consumed else None)
                return
            text = f.read()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        problems.append(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}")
        return
    try:
        request = decode_request(text)
    except OtlpJsonError as exc:
        lines = text.splitlines(keepends=True)
        if any(_is_document(line) for line in lines[1:] if line.strip()):
            # JSON lines whose first line is the broken one: report it, read the rest.
            yield from _json_lines(path, lines, problems)
        else:
            problems.append(f"{path}: {exc}")
        return
    if consumed is not None:
        consumed(len(text))
    yield str(path), request


def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    gzipped = raw.read(2) == _GZIP_MAGIC
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else contextlib.nullcontext(raw)


def _is_document(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:  # UnicodeDecodeError included
        return False
    return True


def _json_lines(
    path: Path, lines: Iterable[bytes], problems: list[str], after_line: Callable[[], None] | None = None
) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
    for number, line in enumerate(lines, start=1):
        if after_line is not None:
            after_line()
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            yield where, decode_request(line.strip())
        except OtlpJsonError as exc:
            problems.append(f"{where}: {exc}")
