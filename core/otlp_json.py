"""OTLP/JSON for trace export requests, as the OTLP specification defines it.

Protobuf's canonical JSON mapping differs from OTLP/JSON in one place that matters:
trace and span ids are hex strings in OTLP/JSON, base64 in protobuf JSON. Everything
else (lowerCamelCase names, enums as integers, 64-bit integers as strings or numbers,
unknown fields ignored) the protobuf parser already accepts.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spanscore.core.otlp_protobuf import MAX_NESTED_MESSAGES, TOO_DEEP
from spanscore.core.quoting import excerpt

_SPAN_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_LINK_ID_FIELDS = ("traceId", "spanId", "trace_id", "span_id")


class OtlpJsonError(ValueError):
    """The body is not a valid OTLP/JSON export request."""


def decode_request(body: bytes | str) -> ExportTraceServiceRequest:
    try:
        document = json.loads(body)
    except RecursionError:
        raise OtlpJsonError("invalid JSON: nested too deeply") from None
    except ValueError as exc:
        # JSONDecodeError and UnicodeDecodeError, and the plain ValueError of a number
        # literal longer than Python's int conversion limit (4,300 digits by default).
        raise OtlpJsonError(f"invalid JSON: {excerpt(str(exc))}") from None
    if not isinstance(document, dict):
        raise OtlpJsonError(f"expected a JSON object, got {type(document).__name__}")
    return decode_document(document)


def decode_document(document: dict[str, Any]) -> ExportTraceServiceRequest:
    """An OTLP/JSON request already parsed from JSON (ids hex; rewritten in place)."""
    _ids_hex_to_base64(document)
    request = ExportTraceServiceRequest()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True, max_recursion_depth=MAX_NESTED_MESSAGES)
    except json_format.ParseError as exc:
        # Its message repeats the path once per level: the innermost cause says what is wrong.
        cause = str(exc).rsplit("field: ", 1)[-1]
        if cause.startswith("Message too deep"):
            raise OtlpJsonError(TOO_DEEP) from None
        raise OtlpJsonError(f"not an OTLP trace export request: {excerpt(cause)}") from None
    return request


def encode_request(request: ExportTraceServiceRequest) -> str:
    """One line of OTLP/JSON (no newline inside), ids as hex."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for span in _spans(document):
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64decode(span[key]).hex()
        for link in span.get("links", ()):
            for key in ("traceId", "spanId"):
                if key in link:
                    link[key] = base64.b64decode(link[key]).hex()
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def encode_logs_request(request: Any) -> str:
    """An ExportLogsServiceRequest as one line of OTLP/JSON, ids as hex."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_logs in _list(document, "resourceLogs"):
        for scope_logs in _list(resource_logs, "scopeLogs"):
            for record in _list(scope_logs, "logRecords"):
                for key in ("traceId", "spanId"):
                    if isinstance(record, dict) and key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def encode_message(message: Any) -> str:
    """Any other protobuf message (responses, rpc status) in protobuf's JSON mapping."""
    return json.dumps(json_format.MessageToDict(message, use_integers_for_enums=True), separators=(",", ":"))


def _spans(document: dict[str, Any]):
    for resource_spans in _list(document, "resourceSpans", "resource_spans"):
        for scope_spans in _list(resource_spans, "scopeSpans", "scope_spans"):
            for span in _list(scope_spans, "spans"):
                if isinstance(span, dict):
                    yield span


def _list(node: Any, *keys: str) -> list[Any]:
    if not isinstance(node, dict):
        return []
    for key in keys:
        value = node.get(key)
        if isinstance(value, list):
            return value
    return []


def _ids_hex_to_base64(document: dict[str, Any]) -> None:
    for i, span in enumerate(_spans(document)):
        _convert(span, _SPAN_ID_FIELDS, f"span {i}")
        links = span.get("links")
        if isinstance(links, list):
            for j, link in enumerate(links):
                if isinstance(link, dict):
                    _convert(link, _LINK_ID_FIELDS, f"span {i} link {j}")


def _convert(node: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        value = node.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise OtlpJsonError(f"{where}: {key} must be a hex string")
        try:
            node[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except (ValueError, binascii.Error):
            raise OtlpJsonError(f"{where}: {key} {excerpt(repr(value))} is not hex") from None
