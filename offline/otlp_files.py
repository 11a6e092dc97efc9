"""Reading recorded traces: the `file` exporter's OTLP/JSON lines, and the JSON that
trace stores hand out, plain or gzipped.

Used by `spanscore inspect`, `score` and `agree`. What each JSON document is, is told by
its keys:

- OTLP/JSON (`resourceSpans`): the `file` exporter's lines, a request per file; ids hex as
  OTLP/JSON has them, or base64 as protobuf's own JSON mapping (and Tempo) writes them;
- Tempo's trace by id: `batches` (`/api/traces/<id>`), or `trace.resourceSpans`
  (`/api/v2/traces/<id>`), ids base64;
- Jaeger's api_v3 answer: OTLP under `result` (`/api/v3/traces/<id>`);
- Jaeger's own JSON model (`data`, or one trace's `traceID` and `spans`), as the Jaeger UI
  downloads it and `/api/traces` answers: converted by `jaeger_json`.

Anything else is a problem, reported by file:line. A file is one (pretty-printed)
document when its first non-blank line is a lone `{` or `[` and the next one is not a
JSON object; otherwise it is JSON lines (whose first lines may be broken). A gzip file
(by its magic bytes, whatever its name) is read the same way once inflated. A broken line
is reported with its file and line number and reading goes on: one bad line never costs
the others.

Reading is bounded whatever the file holds, within the offline readers' shared bounds
(`reading_bounds`): a line, or a whole-file document, of more than MAX_DOCUMENT_BYTES
stops the file there; past MAX_REPORTED_LINES broken lines of a file the rest are
counted, not listed. Trace files' own: a file whose first GIVE_UP_LINES lines are all
broken, or that has more than MAX_BLANK_LINES blank lines in a row, is given up on (it
is not trace JSON); JSON nested deeper than Python's parser goes is a broken line, not a
crash.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_json import OtlpJsonError, decode_document, decode_request
from spanscore.core.quoting import excerpt
from spanscore.core.wording import counted
from spanscore.offline import reading_bounds
from spanscore.offline.jaeger_json import JaegerJsonError, is_jaeger_document, jaeger_requests
from spanscore.offline.reading_bounds import LineProblems, size_text

GIVE_UP_LINES = 1000  # broken lines, none readable, before a file is taken for something else
MAX_BLANK_LINES = 1_000_000  # in a row

OTLP_JSON = "OTLP/JSON"
OTLP_JSON_BASE64 = "OTLP/JSON with base64 ids"
TEMPO_JSON = "Tempo JSON"
JAEGER_API_V3 = "Jaeger api_v3 JSON"
JAEGER_JSON = "Jaeger JSON"

_GZIP_MAGIC = b"\x1f\x8b"


class TraceFileError(ValueError):
    """A document that cannot be read as traces; the message says why."""


def read_requests(
    path: Path,
    problems: list[str],
    consumed: Callable[[int], None] | None = None,
    formats: list[str] | None = None,
) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
    """(where, request) for every request in `path`; problems are appended, not raised.

    Read as bytes and decoded per line, so a line with broken UTF-8 is one broken line.
    `consumed`, when given, hears how many bytes of the file on disk (compressed, for
    gzip) have been read after each request: a progress bar's position. `formats`, when
    given, gets the name of each format found in the file (once each, "gzipped ..." for
    a gzip file).
    """
    try:
        with path.open("rb") as raw, _decompressed(raw) as f:
            reader = _FileReader(path, f, problems, isinstance(f, gzip.GzipFile), [] if formats is None else formats)
            for where, request in reader.requests():
                if consumed is not None:
                    consumed(raw.tell())
                yield where, request
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        problems.append(f"{path}: cannot read: {excerpt(str(getattr(exc, 'strerror', None) or exc))}")


def formats_text(formats: Iterable[str]) -> str:
    """The formats read, each once, in first-seen order: `OTLP/JSON, gzipped Jaeger JSON`."""
    return ", ".join(dict.fromkeys(formats))


def _decode_document(text: bytes) -> tuple[str, list[ExportTraceServiceRequest]]:
    """The format of one JSON document and its requests; TraceFileError when it holds no traces."""
    try:
        request = decode_request(text)
    except OtlpJsonError as exc:
        request, first_error = None, exc
    else:
        if _span_count(request):
            return OTLP_JSON, [request]  # the common case: one parse
        first_error = None
    document = _loads(text)
    if not isinstance(document, dict):
        # Not JSON, or not an object: the OTLP/JSON decoder said what is wrong.
        raise TraceFileError(str(first_error or "expected a JSON object"))
    return _requests_of(document, request, first_error)


@dataclass
class _FileReader:
    path: Path
    stream: IO[bytes] | gzip.GzipFile
    problems: list[str]
    gzipped: bool
    formats: list[str]
    line_number: int = 0
    blank_lines: int = 0
    broken: LineProblems = field(init=False)
    read: int = 0
    stopped: bool = False  # by a line too long, or too many blank ones

    def __post_init__(self) -> None:
        self.broken = LineProblems(self.path, self.problems)

    def requests(self) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
        first = self._next_line()
        if first is None:
            return
        if first.strip() in (b"{", b"["):  # how a pretty-printed document starts
            first_number, blank_lines = self.line_number, self.blank_lines
            second = self._next_line()
            if self.stopped:
                return
            if second is None or not isinstance(_loads(second), dict):
                # Blank lines kept as newlines: the parser's line numbers are the file's.
                yield from self._document(first + b"\n" * (self.blank_lines - blank_lines) + (second or b""))
                return
            yield from self._line(first, first_number)
            yield from self._line(second, self.line_number)
        else:
            yield from self._line(first, self.line_number)
        while (line := self._next_line()) is not None:
            if self.broken.count >= GIVE_UP_LINES and not self.read:
                self.problems.append(
                    f"{self.path}: not read on after {counted(self.broken.count, 'broken line')} and none readable: "
                    "not trace JSON lines"
                )
                break
            yield from self._line(line, self.line_number)
        self.broken.close()

    def _next_line(self) -> bytes | None:
        """The next non-blank line; None at the end, or past a line too long or too many
        blank lines in a row (a gzip of newlines would take minutes to skip)."""
        run, limit = 0, reading_bounds.MAX_DOCUMENT_BYTES
        while True:
            line = self.stream.readline(limit + 1)
            if not line:
                return None
            self.line_number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                self.problems.append(
                    f"{self.path}:{self.line_number}: a line longer than {size_text(limit)}: the file is not read on"
                )
                self.stopped = True
                return None
            if line.strip():
                return line
            self.blank_lines += 1
            run += 1
            if run > MAX_BLANK_LINES:
                self.problems.append(
                    f"{self.path}:{self.line_number}: over {MAX_BLANK_LINES:,} blank lines in a row: "
                    "the file is not read on"
                )
                self.stopped = True
                return None

    def _line(self, line: bytes, number: int) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
        try:
            found, requests = _decode_document(line.strip())
        except TraceFileError as exc:
            self.broken.add(number, str(exc))
            return
        self.read += 1
        self._found(found)
        where = f"{self.path}:{number}"
        for request in requests:
            yield where, request

    def _document(self, start: bytes) -> Iterator[tuple[str, ExportTraceServiceRequest]]:
        limit = reading_bounds.MAX_DOCUMENT_BYTES
        text = start + self.stream.read(limit + 1 - len(start))
        if len(text) > limit:
            self.problems.append(f"{self.path}: a JSON document larger than {size_text(limit)}: not read")
            return
        try:
            found, requests = _decode_document(text)
        except TraceFileError as exc:
            self.problems.append(f"{self.path}: {exc}")
            return
        self._found(found)
        for request in requests:
            yield str(self.path), request

    def _found(self, name: str) -> None:
        name = f"gzipped {name}" if self.gzipped else name
        if name not in self.formats:
            self.formats.append(name)


def _requests_of(
    document: dict[str, Any], direct: ExportTraceServiceRequest | None, direct_error: OtlpJsonError | None
) -> tuple[str, list[ExportTraceServiceRequest]]:
    """A JSON object the OTLP/JSON decoder read no span from: which store's JSON it is."""
    if "resourceSpans" in document or "resource_spans" in document:
        changed = _normalized(document)
        if changed:  # base64 ids, or OTLP's older field names
            return OTLP_JSON_BASE64 if "ids" in changed else OTLP_JSON, [_otlp(document)]
        if direct is None:  # the decoder failed, and said why
            raise TraceFileError(str(direct_error))
        return OTLP_JSON, [direct]  # a request without spans is still one
    if isinstance(document.get("batches"), list):
        return TEMPO_JSON, [_otlp({"resourceSpans": document["batches"]}, normalize=True)]
    if isinstance(document.get("trace"), dict) and "resourceSpans" in document["trace"]:
        return TEMPO_JSON, [_otlp(document["trace"], normalize=True)]
    if isinstance(document.get("result"), dict):
        return JAEGER_API_V3, [_otlp(document["result"], normalize=True)]
    if isinstance(document.get("error"), dict) and "message" in document["error"]:
        # Jaeger api_v3's error answer, `{"error": {"httpCode", "message"}}`.
        raise TraceFileError(f"a Jaeger api_v3 error answer, no traces: {excerpt(str(document['error']['message']))}")
    if not document.get("data") and isinstance(document.get("errors"), list) and document["errors"]:
        # Jaeger's query service's error answer, `{"data": null, "errors": [{"code", "msg"}]}`.
        first = document["errors"][0]
        message = first.get("msg") if isinstance(first, dict) else first
        raise TraceFileError(f"a Jaeger error answer, no traces: {excerpt(str(message))}")
    if is_jaeger_document(document):
        try:
            return JAEGER_JSON, list(jaeger_requests(document))
        except JaegerJsonError as exc:
            raise TraceFileError(f"not Jaeger's JSON model: {exc}") from None
    keys = ", ".join(excerpt(repr(key), 40) for key in list(document)[:3])
    more = ", ..." if len(document) > 3 else ""
    raise TraceFileError(
        f"not trace JSON: an object with keys {{{keys}{more}}}, where OTLP/JSON has resourceSpans, Tempo batches, "
        "Jaeger api_v3 result and Jaeger's JSON data"
    )


def _otlp(document: dict[str, Any], normalize: bool = False) -> ExportTraceServiceRequest:
    """OTLP/JSON held in `document`, read by the OTLP/JSON decoder once its ids are hex."""
    if normalize:
        _normalized(document)
    try:
        return decode_document(document)
    except OtlpJsonError as exc:
        raise TraceFileError(str(exc)) from None


def _normalized(document: dict[str, Any]) -> set[str]:
    """Rewrite base64 ids to hex and OTLP's pre-1.0 names (`instrumentationLibrarySpans`)
    to today's, in place; what changed: "ids", "names"."""
    changed: set[str] = set()
    for resource_spans in _list(document, "resourceSpans") + _list(document, "resource_spans"):
        for old, new in (
            ("instrumentationLibrarySpans", "scopeSpans"),
            ("instrumentation_library_spans", "scopeSpans"),
        ):
            if isinstance(resource_spans, dict) and old in resource_spans and new not in resource_spans:
                resource_spans[new] = resource_spans.pop(old)
                changed.add("names")
        for scope_spans in _list(resource_spans, "scopeSpans") + _list(resource_spans, "scope_spans"):
            if isinstance(scope_spans, dict) and "instrumentationLibrary" in scope_spans:
                scope_spans.setdefault("scope", scope_spans.pop("instrumentationLibrary"))
                changed.add("names")
            for span in _list(scope_spans, "spans"):
                ids = _ids_to_hex(span, (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)))
                for link in _list(span, "links"):
                    ids |= _ids_to_hex(link, (("traceId", 16), ("spanId", 8)))
                if ids:
                    changed.add("ids")
    return changed


def _ids_to_hex(node: Any, keys: tuple[tuple[str, int], ...]) -> bool:
    """Base64 ids as hex. The lengths tell the two apart: 16 bytes are 32 hex digits or 24
    base64 characters, 8 bytes 16 or 12; anything else is left for the decoder to refuse."""
    if not isinstance(node, dict):
        return False
    changed = False
    for key, size in keys:
        value = node.get(key)
        if isinstance(value, str) and value and len(value) != 2 * size:
            try:
                decoded = base64.b64decode(value, validate=True)
            except ValueError:  # binascii.Error included
                continue
            if len(decoded) == size:
                node[key] = decoded.hex()
                changed = True
    return changed


def _list(node: Any, key: str) -> list[Any]:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, list) else []


def _loads(text: bytes) -> Any:
    """The JSON value of `text`, or None when it is not JSON (or nested past the parser)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        return None


def _span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(scope_spans.spans) for rs in request.resource_spans for scope_spans in rs.scope_spans)


def _decompressed(raw: IO[bytes]) -> contextlib.AbstractContextManager[IO[bytes] | gzip.GzipFile]:
    gzipped = raw.read(2) == _GZIP_MAGIC
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else contextlib.nullcontext(raw)
