"""What the OTLP receivers should answer to a request, worked out independently of them.

Built on Python's own gzip reader, protobuf's parser and OTLP's id rules, so a test can
send any body and compare: HTTP 200 exactly when the body inflates within the limit to
a request with at least one valid span (or none at all), 413 when it is too large, 415
for another content type, 400 otherwise; gRPC the same with OK, RESOURCE_EXHAUSTED and
INVALID_ARGUMENT. Where the order of the receiver's checks allows two answers, both are
listed.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_json import OtlpJsonError, decode_request

PROTOBUF, JSON = "application/x-protobuf", "application/json"
CONTENT_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
STEP = 4096


def all_spans(request: ExportTraceServiceRequest) -> list:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def valid_ids(span) -> bool:
    """OTLP's rule, written out independently of the assembler's."""
    return (
        len(span.trace_id) == 16
        and any(span.trace_id)
        and len(span.span_id) == 8
        and any(span.span_id)
        and len(span.parent_span_id) in (0, 8)
    )


def inflate(body: bytes, wbits: int = 16 + zlib.MAX_WBITS) -> tuple[bytes | None, int, bool]:
    """Python's reading of one gzip (or zlib) member: (the data or None if broken, how much
    it had inflated to when it stopped, whether bytes follow the member)."""
    inflater = zlib.decompressobj(wbits=wbits)
    parts: list[bytes] = []
    size = 0
    pending = body
    try:
        while True:  # in steps, so a stream that breaks late still says how much came out first
            part = inflater.decompress(pending, STEP)
            parts.append(part)
            size += len(part)
            pending = inflater.unconsumed_tail
            if not pending:
                break
        tail = inflater.flush()
        parts.append(tail)
        size += len(tail)
    except zlib.error:
        return None, size, False
    if not inflater.eof:
        return None, size, False
    return b"".join(parts), size, bool(inflater.unused_data)


@dataclass(frozen=True)
class Expected:
    allowed: frozenset  # HTTP statuses or gRPC status names
    request: ExportTraceServiceRequest | None = None  # what is taken when accepted
    rejected_spans: int = 0  # spans with invalid ids in an accepted request

    @property
    def accepted(self) -> bool:
        return self.request is not None

    def spans(self) -> set[tuple[bytes, bytes]]:
        """(trace id, span id) of every span that must reach the backend."""
        if self.request is None:
            return set()
        return {(s.trace_id, s.span_id) for s in all_spans(self.request) if valid_ids(s)}


def _decoded(data: bytes, kind: str) -> tuple[ExportTraceServiceRequest | None, int]:
    """The request and its invalid span count when usable, else (None, 0)."""
    try:
        request = ExportTraceServiceRequest.FromString(data) if kind == PROTOBUF else decode_request(data)
    except (DecodeError, OtlpJsonError, ValueError):  # any ValueError: the spec's 400, whatever the decoder raises
        return None, 0
    spans = all_spans(request)
    invalid = sum(not valid_ids(s) for s in spans)
    if spans and invalid == len(spans):
        return None, 0  # every span invalid: rejected
    return request, invalid


def expected_http(body: bytes, content_type: str, encoding: str, limit: int) -> Expected:
    kind = CONTENT_TYPES.get(content_type.split(";")[0].strip().lower())
    if kind is None:
        return Expected(frozenset({415}))
    encoding = encoding.strip().lower()
    if encoding not in ("identity", "gzip", "deflate", ""):
        return Expected(frozenset({415}))
    if encoding in ("", "identity"):
        if len(body) > limit:
            return Expected(frozenset({413}))
        request, invalid = _decoded(body, kind)
        return Expected(frozenset({200}), request, invalid) if request is not None else Expected(frozenset({400}))
    data, inflated, trailing = inflate(body, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    if data is None:
        # The step that failed may have inflated up to STEP more before zlib saw the damage.
        return Expected(frozenset({400, 413} if len(body) > limit or inflated + STEP > limit else {400}))
    if len(body) > limit or len(data) > limit:
        return Expected(frozenset({413}))
    request, invalid = _decoded(data, kind)
    if trailing:
        # Bytes after the first member: the receiver reads them as further gzip members
        # (200, with at least the first member's spans) or answers 400 when they are not.
        if request is None:
            return Expected(frozenset({400}))
        return Expected(frozenset({200, 400}), request, invalid)
    return Expected(frozenset({200}), request, invalid) if request is not None else Expected(frozenset({400}))


def expected_grpc(body: bytes, limit: int) -> Expected:
    if len(body) > limit:
        return Expected(frozenset({"RESOURCE_EXHAUSTED"}))
    request, invalid = _decoded(body, PROTOBUF)
    if request is None:
        return Expected(frozenset({"INVALID_ARGUMENT"}))
    return Expected(frozenset({"OK"}), request, invalid)
