"""People's labels from a running Arize Phoenix, for `spanscore agree --phoenix URL --project NAME`.

The labels are the project's human annotations, read through Phoenix's REST API (checked
against Phoenix 20.26.1):

1. `GET /v1/projects/{project}`: the project, by name (or id); a name Phoenix cannot
   look up in a path (one with `/`, `?` or `#`) is found in `GET /v1/projects`.
2. `GET /v1/annotation_configs`: the bounds of each annotation name's scale (below).
3. `GET /v1/projects/{id}/spans`, 1,000 spans a page, newest first, by cursor: each
   span's trace id and span id; at most `MAX_SPANS` spans are read.
4. Per page, for its span ids (100 to a request): `GET .../span_annotations?span_ids=...`,
   and for the traces not seen before: `GET .../trace_annotations?trace_ids=...`, each
   1,000 annotations a page, by cursor.

Only annotations whose `annotator_kind` is HUMAN are read. LLM and CODE annotations are
other judges' scores, spanscore's own among them: the `phoenix` exporter writes its scores
as LLM or CODE annotations with the identifier `spanscore`, and those are never read back
as people's (an annotation with that identifier is skipped whatever its kind). Phoenix's
notes (annotations named `note`, free text) are not verdicts and are skipped too.

Each human annotation becomes one `HumanLabel`:

- trace id: the annotated span's (from the span list), or the trace annotation's; span
  id: the annotated span's, so the label is compared with the score on that very span
  (spanscore writes a trace's scores on its root span, the span people annotate in the
  normal case); a trace annotation has none and is compared with the root span's score;
- metric: the annotation's name, or with `--annotation NAME=METRIC` the metric that name
  is compared with; with `--annotation`, annotations of other names are not read;
- label and score: the annotation's `result.label` and `result.score`; note: its
  `result.explanation`; annotator: its `identifier` (`px-app:<user>` for one made in
  Phoenix's UI with authentication on), else its `user_id`; source: `phoenix:<id>`.

Phoenix's scores are bare numbers. Their scale is, first, the one given with
`--annotation NAME=METRIC:LOW-HIGH` (`quality=task_completion:1-5`); else the bounds of the
Phoenix annotation config of that name (a continuous config's lower and upper bounds, a
categorical config's lowest and highest value score); else 0-1. A score outside its scale
is a problem, and so is an annotation with neither label nor score. Without
`--annotation`, an annotation name that is not a metric name (a-z, 0-9, `_`, such as
`Correctness`) is a problem, said once per name with its count: compare it with
`--annotation 'Correctness=METRIC'`. With `--annotation`, a NAME no human annotation has
is a problem (a misspelt name reads nothing). Problems of one kind on one name are said once,
with the first annotation's id and how many more there are; the annotation is skipped
and the rest are read.

The API key, when Phoenix has authentication on, comes from `PHOENIX_API_KEY` (Phoenix's
own variable) and is sent as `Authorization: Bearer <key>`; credentials in the URL are
refused, and redirects are not followed (the key would go with them).

Whatever the server at the URL does, the read is bounded:

- time: each request has `TIMEOUT_S` in all, its answer read to the end included (a
  server trickling its answer a byte at a time has its connection cut);
- memory: a page is read up to `MAX_PAGE_BYTES` and parsed only when it holds at most
  `MAX_PAGE_OBJECTS` JSON objects and arrays (a page of `{}` would take 25 times its size
  once parsed); a page past either is asked again with half the items, down to
  `MIN_PAGE`, so that large spans still get read, then refused;
- pages: a list is followed through at most `MAX_PAGES` pages, and a cursor given twice
  ends it (a server handing out new cursors for ever would be read for ever);
- what is echoed: Phoenix's error messages and answers that are not JSON are shown cut
  short, their control characters escaped and the shapes of secrets (API keys, tokens)
  hidden, as spanscore's logs do.

When Phoenix cannot be used at all (unreachable, the project unknown, an HTTP error, an
answer that is not Phoenix's), `PhoenixError` says why in one line.
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import os
import re
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from spanscore.core.quoting import excerpt
from spanscore.core.redaction import safe_url, scrub
from spanscore.core.wording import counted, plural
from spanscore.exporters.phoenix import IDENTIFIER as EXPORTER_IDENTIFIER
from spanscore.offline.human_labels import UNIT_SCALE, HumanLabel, LabelError, Scale, make_label, parse_scale

API_KEY_ENV = "PHOENIX_API_KEY"
HUMAN = "HUMAN"
NOTE = "note"  # Phoenix's name for its free-text notes
SPANS_PAGE = 1000  # Phoenix's largest span page
ANNOTATIONS_PAGE = 1000
IDS_PER_REQUEST = 100  # ids in one query string: about 2.6 kB of span ids, 4.2 kB of trace ids
MAX_SPANS = 1_000_000  # the newest spans read; a larger project is read in part, with a problem
MAX_PAGE_BYTES = 32 * 1024 * 1024  # one page of spans with their attributes
MAX_PAGE_OBJECTS = 500_000  # JSON objects and arrays in a page: a few tens of MB parsed
MIN_PAGE = 10  # a page still too large with this many items is refused
MAX_PAGES = 10_000  # of one list: 10 million annotations at 1,000 a page
TIMEOUT_S = 30.0  # per request, its answer read whole included
SHOWN_CHARS = 160  # of what Phoenix says, in an error
_METRIC = re.compile(r"^[a-z][a-z0-9_]*$")


class PhoenixError(Exception):
    """Phoenix cannot be used at all; the message is one line, fit to print."""


class _HttpStatus(PhoenixError):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class _TooLarge(PhoenixError):
    """A page past `MAX_PAGE_BYTES` or `MAX_PAGE_OBJECTS`."""


def read_phoenix_labels(
    url: str, project: str, names: Mapping[str, str] | None, problems: list[str]
) -> list[HumanLabel]:
    """The human annotations of `project` as labels. `names`: {annotation name: metric,
    or metric:scale}; None reads every human annotation, its name being the metric. Each
    annotation that cannot be used is added to `problems` (grouped, see the module)."""
    wanted = _wanted(names)
    client = PhoenixClient(url, os.environ.get(API_KEY_ENV) or None)
    found = project_id(client, project)
    reader = _Reader(wanted, _config_scales(client))
    base = f"/v1/projects/{urllib.parse.quote(found, safe='')}"
    named = {"include_annotation_names": sorted(wanted)} if wanted is not None else {}
    seen_traces: set[str] = set()
    for spans in client.pages(f"{base}/spans", {"limit": SPANS_PAGE}):
        if reader.spans >= MAX_SPANS:
            problems.append(
                f"phoenix: read the newest {reader.spans:,} spans of project '{excerpt(project, 80)}' only "
                f"(at most {MAX_SPANS:,}); annotations on older spans are not compared"
            )
            break
        trace_of = _span_ids(spans, client)
        reader.spans += len(trace_of)
        for batch in _batches(list(trace_of), IDS_PER_REQUEST):
            params = {"span_ids": batch, "limit": ANNOTATIONS_PAGE, **named}
            for page in client.pages(f"{base}/span_annotations", params, missing_ok=True):
                for annotation in page:
                    reader.take(annotation, trace_of)
        new_traces = sorted(set(trace_of.values()) - seen_traces)
        seen_traces.update(new_traces)
        for batch in _batches(new_traces, IDS_PER_REQUEST):
            params = {"trace_ids": batch, "limit": ANNOTATIONS_PAGE, **named}
            for page in client.pages(f"{base}/trace_annotations", params, missing_ok=True):
                for annotation in page:
                    reader.take(annotation, None)
    problems.extend(reader.problems())
    where = f"the {counted(reader.spans, 'span')} of project '{excerpt(project, 80)}'"
    if wanted is not None:
        for name in wanted:
            if name not in reader.names:
                problems.append(f"phoenix: no human annotation named '{excerpt(name, 60)}' on {where}")
    elif not reader.labels and not reader.grouped:
        problems.append(
            f"phoenix: no human annotation on {where} "
            f"({counted(reader.other_kinds, 'LLM or CODE annotation')} not compared)"
        )
    return reader.labels


# --annotation NAME=METRIC[:SCALE] ---------------------------------------------------------


def _wanted(names: Mapping[str, str] | None) -> dict[str, tuple[str, Scale | None]] | None:
    """{annotation name: (metric, its scale when given)}; PhoenixError on a bad one."""
    if names is None:
        return None
    wanted = {}
    for name, target in names.items():
        metric, _, scale_text = target.partition(":")
        metric = metric.strip()
        shown = excerpt(f"{name}={target}", 80)
        if not _METRIC.match(metric):
            raise PhoenixError(f"--annotation {shown}: '{excerpt(metric, 40)}' is not a metric name (a-z, 0-9, _)")
        scale = None
        if scale_text.strip():
            try:
                scale = parse_scale(scale_text)
            except LabelError as exc:
                raise PhoenixError(f"--annotation {shown}: {exc}") from None
        wanted[name] = (metric, scale)
    return wanted


# Reading annotations --------------------------------------------------------------------


@dataclass
class _Group:
    first: str  # the first annotation's problem, said in full
    count: int = 1


@dataclass
class _Reader:
    wanted: dict[str, tuple[str, Scale | None]] | None
    config_scales: dict[str, Scale]
    labels: list[HumanLabel] = field(default_factory=list)
    grouped: dict[tuple[str, str], _Group] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # of the human annotations read
    spans: int = 0
    other_kinds: int = 0

    def take(self, annotation: Any, trace_of: Mapping[str, str] | None) -> None:
        """One annotation from Phoenix; `trace_of` maps span ids to trace ids for span
        annotations, None for trace annotations."""
        if not isinstance(annotation, dict):
            self._problem("", "shape", f"phoenix: an annotation that is not an object but {type(annotation).__name__}")
            return
        annotation_id = excerpt(str(annotation.get("id")), 60)
        if annotation_id in self.seen:
            return
        self.seen.add(annotation_id)
        if annotation.get("annotator_kind") != HUMAN or annotation.get("identifier") == EXPORTER_IDENTIFIER:
            self.other_kinds += 1
            return
        name = annotation.get("name")
        where = f"phoenix annotation {annotation_id}"
        if not isinstance(name, str) or not name:
            self._problem("", "name", f"{where}: no name")
            return
        self.names.add(name)
        shown = excerpt(name, 60)
        if self.wanted is None:
            if name == NOTE:
                return
            if not _METRIC.match(name):
                self._problem(
                    name,
                    "metric",
                    f"phoenix: human annotations named '{shown}' are not compared: the name is not a metric "
                    f"name (a-z, 0-9, _); compare them with a metric by --annotation '{shown}=METRIC'",
                )
                return
            metric, scale = name, self.config_scales.get(name)
        elif name in self.wanted:
            metric, given = self.wanted[name]
            scale = given or self.config_scales.get(name)
        else:
            return  # Phoenix filters by name already
        result = annotation.get("result") or {}
        if not isinstance(result, dict):
            result = {}
        label, score = result.get("label"), result.get("score")
        if (label is None or label == "") and score is None:
            self._problem(name, "empty", f"{where}: '{shown}' has neither a label nor a score")
            return
        if (
            scale is None
            and isinstance(score, (int, float))
            and not isinstance(score, bool)
            and not 0.0 <= score <= 1.0
        ):
            self._problem(
                name,
                "scale",
                f"{where}: score {score:g} of '{shown}' is outside 0-1, and Phoenix has no annotation config "
                f"with bounds for it: give its scale by --annotation '{shown}={metric}:LOW-HIGH'",
            )
            return
        fields: dict[str, Any] = {
            "metric": metric,
            "label": label,
            "score": score,
            "scale": _scale_text(scale or UNIT_SCALE),
            "annotator": _annotator(annotation),
            "note": result.get("explanation"),
        }
        if trace_of is None:
            fields["trace_id"] = annotation.get("trace_id")
        else:
            span_id = annotation.get("span_id")
            fields["span_id"], fields["trace_id"] = span_id, trace_of.get(span_id) if isinstance(span_id, str) else None
            if fields["trace_id"] is None:
                self._problem(name, "span", f"{where}: on span {excerpt(str(span_id), 40)}, which Phoenix did not list")
                return
        try:
            self.labels.append(
                make_label({k: v for k, v in fields.items() if v is not None}, f"phoenix:{annotation_id}")
            )
        except LabelError as exc:
            self._problem(name, "label", f"{where}: {exc}")

    def _problem(self, name: str, kind: str, message: str) -> None:
        group = self.grouped.get((name, kind))
        if group is None:
            self.grouped[(name, kind)] = _Group(message)
        else:
            group.count += 1

    def problems(self) -> list[str]:
        said = []
        for (_, kind), group in self.grouped.items():
            if kind == "metric":
                said.append(f"{group.first} ({counted(group.count, 'annotation')})")
            elif group.count > 1:
                more = group.count - 1
                said.append(f"{group.first} (and {more:,} more {plural(more, 'annotation')} like it)")
            else:
                said.append(group.first)
        return said


def _annotator(annotation: Mapping[str, Any]) -> str | None:
    for key in ("identifier", "user_id"):
        value = annotation.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _scale_text(scale: Scale) -> str:
    """A scale as `parse_scale` reads it back: plain decimals, never an exponent."""

    def plain(value: float) -> str:
        return f"{value:.9f}".rstrip("0").rstrip(".")

    return f"{plain(scale.low)}-{plain(scale.high)}"


def _span_ids(spans: list[Any], client: PhoenixClient) -> dict[str, str]:
    """{span id: trace id} of a page of Phoenix's spans."""
    found = {}
    for span in spans:
        context = span.get("context") if isinstance(span, dict) else None
        if not isinstance(context, dict):
            raise client.not_phoenix("a span without a context")
        span_id, trace_id = context.get("span_id"), context.get("trace_id")
        if isinstance(span_id, str) and isinstance(trace_id, str):
            found[span_id] = trace_id
    return found


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# The project and its annotation configs --------------------------------------------------


def project_id(client: PhoenixClient, project: str) -> str:
    """The project's id; PhoenixError naming the projects there are when it is unknown."""
    if not project.strip():
        raise PhoenixError("--project needs a project name")
    if not set(project) & set("/?#"):  # Phoenix cannot look such a name up in a path
        try:
            found = client.get(f"/v1/projects/{urllib.parse.quote(project, safe='')}")
        except _HttpStatus as exc:
            if exc.status != 404:
                raise
        else:
            data = found.get("data") if isinstance(found, dict) else None
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                raise client.not_phoenix("a project without an id")
            return data["id"]
    names = []
    for projects in client.pages("/v1/projects", {"limit": 1000}):
        for entry in projects:
            if isinstance(entry, dict) and entry.get("name") == project and isinstance(entry.get("id"), str):
                return entry["id"]
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.append(entry["name"])
    known = ", ".join(excerpt(n, 40) for n in sorted(names)[:10]) + (", ..." if len(names) > 10 else "")
    raise PhoenixError(
        f"Phoenix at {client.where} has no project '{excerpt(project, 80)}' (its projects: {known or 'none'})"
    )


def _config_scales(client: PhoenixClient) -> dict[str, Scale]:
    """{annotation name: scale} from Phoenix's annotation configs that give bounds."""
    scales = {}
    try:
        for configs in client.pages("/v1/annotation_configs", {"limit": 100}):
            for config in configs:
                scale = _config_scale(config) if isinstance(config, dict) else None
                if scale is not None:
                    scales[config["name"]] = scale
    except _HttpStatus as exc:
        if exc.status != 404:  # a Phoenix before annotation configs (version 9)
            raise
    return scales


def _config_scale(config: Mapping[str, Any]) -> Scale | None:
    if not isinstance(config.get("name"), str):
        return None
    if config.get("type") == "CATEGORICAL":
        values = listed if isinstance(listed := config.get("values"), list) else []
        scores = [score for v in values if isinstance(v, dict) and _number(score := v.get("score"))]
        low, high = (min(scores), max(scores)) if scores else (None, None)
    else:  # CONTINUOUS, FREEFORM
        low, high = config.get("lower_bound"), config.get("upper_bound")
    if _number(low) and _number(high) and high > low:
        return Scale(float(low), float(high))
    return None


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# HTTP ----------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error, said with where it points: the API key is not sent on."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Deadline:
    """One request's time, whole: when it is up, the request's sockets are shut, which
    ends any read blocked on them (a socket's own timeout bounds each read only)."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class _Watched(http.client.HTTPConnection):
    """A connection whose socket, once connected, is under a `_Deadline`."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()
        self.deadline.watch(self.sock)


class _WatchedHTTP(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPS(_Watched, http.client.HTTPSConnection):
    pass


class _WatchedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's http and https openers, their connections' sockets under a `_Deadline`
    (proxies from the environment are used as urllib uses them)."""

    def __init__(self, deadline: _Deadline):
        urllib.request.HTTPHandler.__init__(self)
        urllib.request.HTTPSHandler.__init__(self)
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTP, deadline=self.deadline), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTPS, deadline=self.deadline), req)


class PhoenixClient:
    def __init__(self, url: str, api_key: str | None):
        parts = urllib.parse.urlsplit(url.strip())
        self.where = safe_url(url.strip()).rstrip("/") or "(no URL)"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PhoenixError(f"--phoenix takes Phoenix's http:// or https:// URL, got '{excerpt(self.where, 100)}'")
        if parts.username is not None or parts.password is not None:
            raise PhoenixError(f"--phoenix {self.where}: credentials go in {API_KEY_ENV}, not in the URL")
        self.base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self.api_key = api_key
        self.headers = {"Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """The JSON answer to GET `path`; _HttpStatus for an HTTP error, _TooLarge past the
        page bounds, PhoenixError when Phoenix cannot be reached in time or does not answer
        JSON."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        request = urllib.request.Request(f"{self.base}{path}{'?' + query if query else ''}", headers=self.headers)
        late = PhoenixError(f"cannot reach Phoenix at {self.where}: no answer within {TIMEOUT_S:g} s")
        with _Deadline(TIMEOUT_S) as deadline:
            opener = urllib.request.build_opener(_NoRedirect, _WatchedHandler(deadline))
            try:
                with opener.open(request, timeout=TIMEOUT_S) as response:
                    body = response.read(MAX_PAGE_BYTES + 1)
            except urllib.error.HTTPError as error:
                raise self._status_error(path, error) from None
            except urllib.error.URLError as exc:
                if deadline.expired:
                    raise late from None
                raise PhoenixError(f"cannot reach Phoenix at {self.where}: {_reason(exc.reason)}") from None
            except (OSError, http.client.HTTPException) as exc:
                if deadline.expired:
                    raise late from None
                raise PhoenixError(f"cannot reach Phoenix at {self.where}: {_reason(exc)}") from None
            if deadline.expired:  # the body may have been cut short without an error
                raise late
        if len(body) > MAX_PAGE_BYTES:
            raise _TooLarge(f"Phoenix at {self.where}: GET {path} answered more than {MAX_PAGE_BYTES:,} bytes")
        if body.count(b"{") + body.count(b"[") > MAX_PAGE_OBJECTS:  # an upper bound: braces in strings count too
            raise _TooLarge(f"Phoenix at {self.where}: GET {path} answered more than {MAX_PAGE_OBJECTS:,} objects")
        try:
            return json.loads(body)
        except ValueError:
            text = body[: SHOWN_CHARS * 4].decode("utf-8", errors="replace").strip()
            raise self.not_phoenix(f"GET {path} answered '{_shown(text, 80)}', not JSON") from None

    def pages(self, path: str, params: Mapping[str, Any], missing_ok: bool = False) -> Iterator[list[Any]]:
        """Each page's `data` of a paginated list, by `next_cursor`. `missing_ok`: a 404 is
        an empty list (Phoenix answers 404 for span or trace ids that are gone). A page past
        the page bounds is asked again with half its `limit`, down to `MIN_PAGE`."""
        for data, _ in self.cursor_pages(path, params, None, missing_ok):
            yield data

    def cursor_pages(
        self, path: str, params: Mapping[str, Any], cursor: str | None, missing_ok: bool = False
    ) -> Iterator[tuple[list[Any], str | None]]:
        """As `pages`, from the page at `cursor` (None: the first), each page's `data` with
        the cursor of the page after it (None after the last): a pull stopped after a page
        goes on from that cursor."""
        seen: set[str] = set()
        params = dict(params)
        for _ in range(MAX_PAGES):
            try:
                answer = self.get(path, {**params, "cursor": cursor} if cursor else params)
            except _HttpStatus as exc:
                if missing_ok and exc.status == 404:
                    return
                raise
            except _TooLarge as exc:
                limit = params.get("limit")
                if not isinstance(limit, int):
                    raise
                if limit <= MIN_PAGE:
                    raise _TooLarge(f"{exc} for a page of {limit} items") from None
                params["limit"] = max(MIN_PAGE, limit // 2)
                continue
            data = answer.get("data") if isinstance(answer, dict) else None
            if not isinstance(data, list):
                raise self.not_phoenix(f"GET {path} answered no list of data")
            following = answer.get("next_cursor")
            following = str(following) if following and data else None
            yield data, following
            if following is None:
                return
            if following in seen:  # the current cursor included
                raise self.not_phoenix(f"GET {path} gave the same page cursor twice")
            seen.add(following)
            cursor = following
        raise self.not_phoenix(f"GET {path} gave more than {MAX_PAGES:,} pages, each with a new cursor")

    def not_phoenix(self, what: str) -> PhoenixError:
        return PhoenixError(f"{self.where} does not answer as Phoenix's REST API does: {what}")

    def _status_error(self, path: str, error: urllib.error.HTTPError) -> _HttpStatus:
        try:
            text = error.read(2000).decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException):
            text = ""
        detail = _detail(text)
        message = f"Phoenix at {self.where}: GET {path}: HTTP {error.code}"
        if detail:
            message += f": {_shown(detail, SHOWN_CHARS)}"
        if error.code in (301, 302, 303, 307, 308):
            location = error.headers.get("Location", "")
            target = urllib.parse.urljoin(self.base + path, location)
            message += f" (a redirect to {excerpt(safe_url(target), 120)}, not followed: give that URL)"
        elif error.code in (401, 403):
            message += (
                f" ({API_KEY_ENV} was refused)"
                if self.api_key
                else f" (Phoenix has authentication on: set {API_KEY_ENV} to an API key)"
            )
        return _HttpStatus(message, error.code)


def _detail(text: str) -> str:
    """Phoenix's reason: `detail` of a JSON error, else the text (a 404 is plain text)."""
    try:
        document = json.loads(text)
    except ValueError:
        return " ".join(text.split())
    if isinstance(document, dict) and "detail" in document:
        detail = document["detail"]
        return detail if isinstance(detail, str) else json.dumps(detail)
    return " ".join(text.split())


def _shown(text: str, limit: int) -> str:
    """What Phoenix said, fit for one line: secret shapes hidden, control characters
    escaped, cut to `limit` characters."""
    return excerpt(scrub(text, max_chars=len(text)), limit)


def _reason(reason: Any) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return excerpt(reason.strerror, 120)
    return excerpt(str(reason) or type(reason).__name__, 120)
