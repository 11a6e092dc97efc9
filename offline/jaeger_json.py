"""Jaeger's JSON trace model as OTLP requests: what the Jaeger UI's "Download Results"
saves (`{"data": [trace, ...]}`), what its `/api/traces` answers, or one trace object.

A trace is `traceID`, `spans` and `processes` (process id -> `serviceName` and `tags`);
a span has `traceID`, `spanID`, `operationName`, `references` (`CHILD_OF` or
`FOLLOWS_FROM` another span), `startTime` and `duration` in microseconds, `tags`, `logs`
(`timestamp` and `fields`) and `processID` (or the process itself under `process`).
Tags are `{"key", "type", "value"}` with `type` one of string, bool, int64, float64 and
binary (base64). Ids are hex, without leading zeros in some writers.

The mapping is the OpenTelemetry Collector's Jaeger translator's, so a span reads as it
would had it been sent to a collector in Jaeger's protocol: the first `CHILD_OF` in the
span's own trace is the parent, other references are links (`opentracing.ref_type`);
the `span.kind` tag is the kind; an `error` tag that is true, else `otel.status_code`,
is the status code and `otel.status_description` its message (no status is read from
HTTP status codes, unlike the translator); `otel.scope.name`/`otel.scope.version` (or
`otel.library.*`) the scope; `w3c.tracestate` the trace state; each log is an event
named by its `event` field; the process is the resource (`service.name` and its tags).
Those tags are taken off the attributes, the rest kept with their types.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from spanscore.core.quoting import excerpt

NANOS_PER_MICRO = 1000
SHOWN_CHARS = 60  # of a value quoted in a message
_KINDS = {
    "internal": Span.SPAN_KIND_INTERNAL,
    "server": Span.SPAN_KIND_SERVER,
    "client": Span.SPAN_KIND_CLIENT,
    "producer": Span.SPAN_KIND_PRODUCER,
    "consumer": Span.SPAN_KIND_CONSUMER,
}
_STATUS_CODES = {"OK": Status.STATUS_CODE_OK, "ERROR": Status.STATUS_CODE_ERROR}
_INTEGER_TEXT = re.compile(r"^-?[0-9]{1,19}$")
_SCOPE_NAME = ("otel.scope.name", "otel.library.name")
_SCOPE_VERSION = ("otel.scope.version", "otel.library.version")
# Tags that become span fields rather than attributes.
_SPAN_FIELD_TAGS = frozenset({"span.kind", "w3c.tracestate", *_SCOPE_NAME, *_SCOPE_VERSION})


class JaegerJsonError(ValueError):
    """The document is not Jaeger's JSON trace model; the message says where and why."""


def is_jaeger_document(document: Mapping[str, Any]) -> bool:
    """A Jaeger answer or export (`data`), or a single trace (`traceID` and `spans`)."""
    return "data" in document or ("spans" in document and "traceID" in document)


def jaeger_requests(document: Mapping[str, Any]) -> Iterator[ExportTraceServiceRequest]:
    """One request per trace of the document; JaegerJsonError on the first bad field."""
    if "data" not in document:
        yield _trace_request(document, "trace")
        return
    traces = document["data"]
    if not isinstance(traces, list):
        raise JaegerJsonError(f"data: expected a list of traces, got {type(traces).__name__}")
    for index, trace in enumerate(traces):
        yield _trace_request(trace, f"data[{index}]")


def _trace_request(trace: Any, where: str) -> ExportTraceServiceRequest:
    if not isinstance(trace, dict):
        raise JaegerJsonError(f"{where}: expected a trace object, got {type(trace).__name__}")
    processes = trace.get("processes") or {}
    if not isinstance(processes, dict):
        raise JaegerJsonError(f"{where}.processes: expected an object, got {type(processes).__name__}")
    spans = trace.get("spans")
    if not isinstance(spans, list):
        raise JaegerJsonError(f"{where}.spans: expected a list of spans, got {type(spans).__name__}")
    request = ExportTraceServiceRequest()
    # One resource per process, one scope per instrumentation library, in first-seen order.
    resources: dict[str, ResourceSpans] = {}
    scopes: dict[tuple[str, str, str], Any] = {}
    for index, raw in enumerate(spans):
        here = f"{where}.spans[{index}]"
        if not isinstance(raw, dict):
            raise JaegerJsonError(f"{here}: expected a span object, got {type(raw).__name__}")
        process_key, process, process_where = _process_of(raw, processes, here, where)
        resource_spans = resources.get(process_key)
        if resource_spans is None:
            resource_spans = resources[process_key] = request.resource_spans.add()
            _fill_resource(resource_spans, process, process_where)
        tags = _tags(raw.get("tags"), f"{here}.tags")
        scope = (process_key, _text_tag(tags, _SCOPE_NAME), _text_tag(tags, _SCOPE_VERSION))
        scope_spans = scopes.get(scope)
        if scope_spans is None:
            scope_spans = scopes[scope] = resource_spans.scope_spans.add()
            scope_spans.scope.name, scope_spans.scope.version = scope[1], scope[2]
        _fill_span(scope_spans.spans.add(), raw, tags, here)
    return request


def _process_of(span: dict[str, Any], processes: dict[str, Any], where: str, trace_where: str) -> tuple[str, Any, str]:
    """The span's process, from `processes` by `processID` or embedded as `process`: a
    key equal for equal processes, the process, and where it is."""
    if span.get("process") is not None:
        # Each span repeats its process: spans of equal processes share one resource.
        return "embedded:" + json.dumps(span["process"], sort_keys=True), span["process"], f"{where}.process"
    process_id = span.get("processID")
    if process_id is None:
        return "", {}, where
    if not isinstance(process_id, str) or process_id not in processes:
        raise JaegerJsonError(f"{where}: processID {_shown(process_id)} is not in the trace's processes")
    return process_id, processes[process_id], f"{trace_where}.processes[{excerpt(repr(process_id))}]"


def _fill_resource(resource_spans: ResourceSpans, process: Any, where: str) -> None:
    if not isinstance(process, dict):
        raise JaegerJsonError(f"{where}: expected a process object, got {type(process).__name__}")
    service = process.get("serviceName")
    if service is not None:
        if not isinstance(service, str):
            raise JaegerJsonError(f"{where}.serviceName: expected a string, got {type(service).__name__}")
        resource_spans.resource.attributes.add(key="service.name", value=AnyValue(string_value=service))
    for key, value in _tags(process.get("tags"), f"{where}.tags").items():
        resource_spans.resource.attributes.add(key=key, value=value)


def _fill_span(span: Span, raw: dict[str, Any], tags: dict[str, AnyValue], where: str) -> None:
    trace_id = _id(raw.get("traceID"), 16, f"{where}.traceID")
    span.trace_id = trace_id
    span.span_id = _id(raw.get("spanID"), 8, f"{where}.spanID")
    name = raw.get("operationName", "")
    if not isinstance(name, str):
        raise JaegerJsonError(f"{where}.operationName: expected a string, got {type(name).__name__}")
    span.name = name
    start = _micros(raw.get("startTime", 0), f"{where}.startTime")
    span.start_time_unix_nano = start * NANOS_PER_MICRO
    span.end_time_unix_nano = (start + _micros(raw.get("duration", 0), f"{where}.duration")) * NANOS_PER_MICRO
    _fill_references(span, raw, trace_id, where)
    kind = tags.get("span.kind")
    if kind is not None:
        span.kind = _KINDS.get(kind.string_value.lower(), Span.SPAN_KIND_UNSPECIFIED)
    _fill_status(span, tags)
    state = tags.get("w3c.tracestate")
    if state is not None:
        span.trace_state = state.string_value
    for key, value in tags.items():
        if key not in _SPAN_FIELD_TAGS:
            span.attributes.add(key=key, value=value)
    logs = raw.get("logs") or []
    if not isinstance(logs, list):
        raise JaegerJsonError(f"{where}.logs: expected a list, got {type(logs).__name__}")
    for index, log in enumerate(logs):
        _fill_event(span.events.add(), log, f"{where}.logs[{index}]")


def _fill_references(span: Span, raw: dict[str, Any], trace_id: bytes, where: str) -> None:
    references = raw.get("references") or []
    if not isinstance(references, list):
        raise JaegerJsonError(f"{where}.references: expected a list, got {type(references).__name__}")
    for index, reference in enumerate(references):
        here = f"{where}.references[{index}]"
        if not isinstance(reference, dict):
            raise JaegerJsonError(f"{here}: expected a reference object, got {type(reference).__name__}")
        ref_trace = _id(reference.get("traceID"), 16, f"{here}.traceID")
        ref_span = _id(reference.get("spanID"), 8, f"{here}.spanID")
        ref_type = reference.get("refType", "CHILD_OF")
        if ref_type not in ("CHILD_OF", "FOLLOWS_FROM"):
            raise JaegerJsonError(f"{here}.refType: {_shown(ref_type)} is not CHILD_OF or FOLLOWS_FROM")
        if ref_type == "CHILD_OF" and ref_trace == trace_id and not span.parent_span_id:
            span.parent_span_id = ref_span
            continue
        link = span.links.add(trace_id=ref_trace, span_id=ref_span)
        link.attributes.add(key="opentracing.ref_type", value=AnyValue(string_value=ref_type.lower()))
    # Jaeger's older JSON named the parent outright.
    if not span.parent_span_id and raw.get("parentSpanID"):
        span.parent_span_id = _id(raw["parentSpanID"], 8, f"{where}.parentSpanID")


def _fill_status(span: Span, tags: dict[str, AnyValue]) -> None:
    """An `error` tag that is true is the status, whatever `otel.status_code` says; the
    description is taken off the attributes only when a status was set."""
    error = tags.get("error")
    code = tags.pop("otel.status_code", None)
    if error is not None and error.WhichOneof("value") == "bool_value" and error.bool_value:
        del tags["error"]
        span.status.code = Status.STATUS_CODE_ERROR
    elif code is not None:
        span.status.code = _STATUS_CODES.get(code.string_value.upper(), Status.STATUS_CODE_UNSET)
    else:
        return
    description = tags.pop("otel.status_description", None)
    if description is not None:
        span.status.message = description.string_value


def _fill_event(event: Span.Event, log: Any, where: str) -> None:
    if not isinstance(log, dict):
        raise JaegerJsonError(f"{where}: expected a log object, got {type(log).__name__}")
    event.time_unix_nano = _micros(log.get("timestamp", 0), f"{where}.timestamp") * NANOS_PER_MICRO
    fields = _tags(log.get("fields"), f"{where}.fields")
    name = fields.pop("event", None)
    if name is not None and name.WhichOneof("value") == "string_value":
        event.name = name.string_value
    elif name is not None:
        fields["event"] = name  # not a name: kept as the field it was
    for key, value in fields.items():
        event.attributes.add(key=key, value=value)


def _tags(tags: Any, where: str) -> dict[str, AnyValue]:
    """Jaeger key/values by key, typed; a later duplicate key wins, as in an attribute map."""
    if tags is None:
        return {}
    if not isinstance(tags, list):
        raise JaegerJsonError(f"{where}: expected a list, got {type(tags).__name__}")
    typed: dict[str, AnyValue] = {}
    for index, tag in enumerate(tags):
        here = f"{where}[{index}]"
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise JaegerJsonError(f"{here}: expected {{key, type, value}} with a string key")
        typed[tag["key"]] = _typed(tag.get("type"), tag.get("value"), f"{here} ({excerpt(tag['key'])})")
    return typed


def _typed(kind: Any, value: Any, where: str) -> AnyValue:
    """One tag value by its declared type; a missing type is read from the JSON value."""
    if kind is None:
        kind = {bool: "bool", int: "int64", float: "float64"}.get(type(value), "string")
    if kind == "string" and isinstance(value, str):
        return AnyValue(string_value=value)
    if kind == "bool" and isinstance(value, bool):
        return AnyValue(bool_value=value)
    if kind == "bool" and value in ("true", "false"):  # some writers quote it
        return AnyValue(bool_value=value == "true")
    if kind == "int64":
        number = _integer(value)
        if number is not None:
            return AnyValue(int_value=number)
    if kind == "float64" and not isinstance(value, bool) and isinstance(value, int | float):
        return AnyValue(double_value=float(value))
    if kind == "binary" and isinstance(value, str):
        try:
            return AnyValue(bytes_value=base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            raise JaegerJsonError(f"{where}: binary value is not base64") from None
    raise JaegerJsonError(f"{where}: {_shown(value)} is not a {_shown(kind)} value")


def _id(value: Any, size: int, where: str) -> bytes:
    """A hex id of `size` bytes; shorter hex (Jaeger drops leading zeros) is padded."""
    if not isinstance(value, str) or not 0 < len(value) <= 2 * size:
        raise JaegerJsonError(f"{where}: {_shown(value)} is not a hex id of up to {2 * size} digits")
    try:
        return bytes.fromhex(value.rjust(2 * size, "0"))
    except ValueError:
        raise JaegerJsonError(f"{where}: {_shown(value)} is not hex") from None


def _integer(value: Any) -> int | None:
    """An int64 from a JSON number, or from text as some writers quote 64-bit numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INTEGER_TEXT.match(value):
        value = int(value)
    return value if isinstance(value, int) and -(2**63) <= value < 2**63 else None


def _micros(value: Any, where: str) -> int:
    # Half of uint64's nanoseconds each, so that a start plus a duration still fits.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63 // NANOS_PER_MICRO:
        raise JaegerJsonError(f"{where}: {_shown(value)} is not a time in microseconds")
    return value


def _shown(value: Any) -> str:
    """A value for a message: short text quoted and cut, a container by its kind only (its
    repr could be megabytes, or nested past what repr recurses through)."""
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARS:
            return repr(value)  # escapes what is not printable
        return f"{repr(value[:SHOWN_CHARS])[:-1]}…' ({len(value):,} characters)"
    if value is None or isinstance(value, bool | int | float):
        return excerpt(repr(value), SHOWN_CHARS)
    return f"a {type(value).__name__}"


def _text_tag(tags: dict[str, AnyValue], keys: tuple[str, ...]) -> str:
    for key in keys:
        if key in tags:
            return tags[key].string_value
    return ""
