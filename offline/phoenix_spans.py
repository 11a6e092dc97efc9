"""A Phoenix project's traces as OTLP requests, for `spanscore score --phoenix URL --project NAME`.

The traces are pulled through Phoenix's REST API (checked against Phoenix 20.26.1), a page
of traces at a time so that memory holds one page whatever the project's size:

1. `GET /v1/projects/{id}/spans?parent_id=null`: the root spans (those without a parent),
   newest first, `TRACES_PAGE` a page by cursor, within `--since`/`--until` on their start
   time (`start_time` inclusive, `end_time` exclusive, as Phoenix reads them);
2. for the page's traces (`IDS_PER_REQUEST` to a request):
   `GET /v1/projects/{id}/spans?trace_id=...`, every span of those traces, whatever its
   time, `SPANS_PAGE` a page by cursor.

A trace is found by its root span: a trace Phoenix holds no root span of (its root is
remote, or not exported) is not pulled, and one with parentless spans on two pages is
pulled with each (no set of every trace id pulled is kept: memory stays a page's).

Each trace becomes one OTLP request, its spans as Phoenix keeps them: ids, parent id,
name, start and end times (Phoenix keeps microseconds), status code and message,
attributes (Phoenix hands them nested by their dots; they are flattened back, lists of
objects by index as OpenInference writes them, so `llm.input_messages.0.message.role`
reads as sent) and events (name, time, attributes). Phoenix's span kind (OpenInference's:
LLM, TOOL, ...) is `openinference.span.kind` when the attributes lack it. What Phoenix does
not keep cannot come back: the resource (`service.name`), the instrumentation scope, the
OpenTelemetry span kind, links and trace state. So session keys and scoring scopes read
from the resource do not apply to pulled spans.

The HTTP client, its bounds (time per request, page size, pages per list), the API key
(`PHOENIX_API_KEY`) and the project lookup are `phoenix_labels`', the same for every
pull from Phoenix.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from spanscore.core.quoting import excerpt
from spanscore.offline.phoenix_labels import PhoenixClient, PhoenixError, project_id

TRACES_PAGE = 100  # root spans a page: the traces held in memory at once
SPANS_PAGE = 1000  # Phoenix's largest span page
IDS_PER_REQUEST = 50  # trace ids in one query string: about 2.5 kB
OPENINFERENCE_KIND = "openinference.span.kind"
_STATUS = {"OK": Status.STATUS_CODE_OK, "ERROR": Status.STATUS_CODE_ERROR, "UNSET": Status.STATUS_CODE_UNSET}
_INT64 = (-(2**63), 2**63 - 1)


@dataclass
class TracesPage:
    """One page of traces: a request each, and the cursor of the page after it (None: the last)."""

    requests: list[tuple[str, ExportTraceServiceRequest]]  # (trace id, its spans)
    spans: int
    next_cursor: str | None


class PhoenixTraces:
    """The traces of a project, page by page from a cursor (None: the newest)."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        project: str,
        since: datetime | None,
        until: datetime | None,
        page_traces: int = TRACES_PAGE,
    ):
        self.page_traces = page_traces
        self.client = PhoenixClient(url, api_key)
        self.where = self.client.where
        self.project = project
        self.project_id = project_id(self.client, project)
        self.base = f"/v1/projects/{urllib.parse.quote(self.project_id, safe='')}/spans"
        self.window: dict[str, str] = {}
        if since is not None:
            self.window["start_time"] = since.isoformat()
        if until is not None:
            self.window["end_time"] = until.isoformat()

    def pages(self, cursor: str | None) -> Iterator[TracesPage]:
        params: dict[str, Any] = {"parent_id": "null", "limit": self.page_traces, **self.window}
        for roots, following in self.client.cursor_pages(self.base, params, cursor):
            trace_ids = list(dict.fromkeys(_context(span, self.client)[0] for span in roots))
            yield self._page(trace_ids, following)

    def _page(self, trace_ids: list[str], following: str | None) -> TracesPage:
        by_trace: dict[str, list[dict[str, Any]]] = {trace_id: [] for trace_id in trace_ids}
        for start in range(0, len(trace_ids), IDS_PER_REQUEST):
            params = {"trace_id": trace_ids[start : start + IDS_PER_REQUEST], "limit": SPANS_PAGE}
            for spans, _ in self.client.cursor_pages(self.base, params, None):
                for span in spans:
                    trace_id, _ = _context(span, self.client)
                    if trace_id in by_trace:
                        by_trace[trace_id].append(span)
        requests = [(trace_id, trace_request(spans)) for trace_id, spans in by_trace.items() if spans]
        return TracesPage(requests, sum(map(len, by_trace.values())), following)


def _context(span: Any, client: PhoenixClient) -> tuple[str, str]:
    context = span.get("context") if isinstance(span, dict) else None
    if not isinstance(context, dict):
        raise client.not_phoenix("a span without a context")
    trace_id, span_id = context.get("trace_id"), context.get("span_id")
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        raise client.not_phoenix("a span without a trace id or span id")
    return trace_id, span_id


# Phoenix's span JSON as OTLP -------------------------------------------------------------


def trace_request(spans: list[dict[str, Any]]) -> ExportTraceServiceRequest:
    """One request holding `spans` (Phoenix's JSON) under one empty resource and scope;
    PhoenixError on a field that cannot be read."""
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    for raw in spans:
        _fill_span(scope_spans.spans.add(), raw)
    return request


def _fill_span(span: Span, raw: dict[str, Any]) -> None:
    context = raw.get("context") or {}
    where = f"span {excerpt(str(context.get('span_id')), 40)}"
    span.trace_id = _id(context.get("trace_id"), 16, where)
    span.span_id = _id(context.get("span_id"), 8, where)
    if raw.get("parent_id"):
        span.parent_span_id = _id(raw["parent_id"], 8, where)
    span.name = str(raw.get("name") or "")
    span.start_time_unix_nano = _nanos(raw.get("start_time"), where)
    span.end_time_unix_nano = _nanos(raw.get("end_time"), where) if raw.get("end_time") else span.start_time_unix_nano
    span.kind = Span.SPAN_KIND_INTERNAL  # Phoenix keeps OpenInference's kind, not OpenTelemetry's
    span.status.code = _STATUS.get(str(raw.get("status_code") or "UNSET").upper(), Status.STATUS_CODE_UNSET)
    if raw.get("status_message"):
        span.status.message = str(raw["status_message"])
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise PhoenixError(f"Phoenix's {where}: attributes are not an object")
    _fill_attributes(span.attributes, attributes)
    kind = raw.get("span_kind")
    if isinstance(kind, str) and kind and OPENINFERENCE_KIND not in {a.key for a in span.attributes}:
        span.attributes.add(key=OPENINFERENCE_KIND).value.string_value = kind
    for event in raw.get("events") or ():
        if not isinstance(event, dict):
            raise PhoenixError(f"Phoenix's {where}: an event that is not an object")
        added = span.events.add(name=str(event.get("name") or ""))
        added.time_unix_nano = _nanos(event.get("timestamp"), where)
        event_attributes = event.get("attributes") or {}
        if isinstance(event_attributes, dict):
            _fill_attributes(added.attributes, event_attributes)


def _fill_attributes(target: Any, attributes: dict[str, Any]) -> None:
    for key, value in _flattened(attributes, ""):
        converted = _value(value)
        if converted is not None:
            target.append(KeyValue(key=key, value=converted))


def _flattened(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """Phoenix's nested attributes as the flat keys they were sent with: objects by their
    keys, lists of objects by index (OpenInference's `llm.input_messages.0.message.role`)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _flattened(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, list) and node and all(isinstance(item, dict) for item in node):
        for index, item in enumerate(node):
            yield from _flattened(item, f"{prefix}.{index}")
    else:
        yield prefix, node


def _value(value: Any) -> AnyValue | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value) if _INT64[0] <= value <= _INT64[1] else AnyValue(string_value=str(value))
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list):
        converted = AnyValue()
        converted.array_value.SetInParent()
        for item in value:
            item_value = _value(item)
            if item_value is not None:
                converted.array_value.values.append(item_value)
        return converted
    return AnyValue(string_value=str(value))


def _id(value: Any, size: int, where: str) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise PhoenixError(f"Phoenix's {where}: id {excerpt(repr(value), 60)} is not {size * 2} hex digits")
    return raw


def _nanos(value: Any, where: str) -> int:
    """An ISO 8601 time (Phoenix's, with an offset or in UTC) as Unix nanoseconds."""
    if not isinstance(value, str):
        raise PhoenixError(f"Phoenix's {where}: time {excerpt(repr(value), 60)} is not ISO 8601 text")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PhoenixError(f"Phoenix's {where}: time {excerpt(repr(value), 60)} is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    # Whole microseconds, exactly: a float of seconds loses them past 2**53 ns.
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
