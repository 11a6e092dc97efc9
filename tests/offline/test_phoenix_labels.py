"""`offline.phoenix_labels` against a stand-in HTTP server: the answers a real Phoenix does
not give (redirects, HTML, a cursor that never ends, a slow server) and what the messages
hold back (the API key, the URL's credentials and query). tests/e2e/test_phoenix_labels.py
reads a real Phoenix."""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from spanscore.offline import phoenix_labels
from spanscore.offline.phoenix_labels import PhoenixError, read_phoenix_labels
from tests.support.hostile_http import HostileServer, Request, answer_json, huge, trickle

Reply = tuple[int, dict[str, str], bytes]
KEY = "px-key-0123456789"


class Stub:
    """Answers GETs with `answer(path, query)`; keeps each request's path and headers."""

    def __init__(self, answer: Callable[[str, dict[str, list[str]]], Reply]):
        self.requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                stub.requests.append((parts.path, query, dict(self.headers)))
                status, headers, body = answer(parts.path, query)
                self.send_response(status)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[Callable[..., Stub]]:
    started: list[Stub] = []

    def start(answer: Callable[[str, dict[str, list[str]]], Reply]) -> Stub:
        started.append(Stub(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def ok(document: object) -> Reply:
    return 200, {"Content-Type": "application/json"}, json.dumps(document).encode()


TRACE, ROOT, CHILD = "ab" * 16, "01" * 8, "02" * 8


def phoenix_like(span_annotations: list[dict], pages: dict[str, str] | None = None):
    """A project `p` with one trace of two spans and the given span annotations."""

    def answer(path: str, query: dict[str, list[str]]) -> Reply:
        if path == "/v1/projects/p":
            return ok({"data": {"id": "UHJvamVjdDox", "name": "p"}})
        if path == "/v1/annotation_configs":
            return ok({"data": [], "next_cursor": None})
        if path == "/v1/projects/UHJvamVjdDox/spans":
            spans = [{"context": {"trace_id": TRACE, "span_id": s}} for s in (ROOT, CHILD)]
            return ok({"data": spans, "next_cursor": None})
        if path == "/v1/projects/UHJvamVjdDox/span_annotations":
            cursor = (query.get("cursor") or [""])[0]
            return ok({"data": span_annotations, "next_cursor": (pages or {}).get(cursor)})
        if path == "/v1/projects/UHJvamVjdDox/trace_annotations":
            return ok({"data": [], "next_cursor": None})
        return 404, {}, b"Not Found"

    return answer


def human(annotation_id: str, **fields: object) -> dict:
    return {"id": annotation_id, "span_id": ROOT, "annotator_kind": "HUMAN", "identifier": "", **fields}


def test_the_api_key_is_sent_as_a_bearer_token_and_kept_out_of_messages(stub, monkeypatch):
    monkeypatch.setenv("PHOENIX_API_KEY", KEY)
    server = stub(phoenix_like([human("a1", name="task_completion", result={"label": "pass"})]))
    [label] = read_phoenix_labels(server.url, "p", None, problems := [])
    assert problems == [] and (label.trace_id, label.span_id, label.label) == (TRACE, ROOT, "pass")
    assert {headers["Authorization"] for _, _, headers in server.requests} == {f"Bearer {KEY}"}
    # Both span ids in one request, with the limit; names go to Phoenix when given.
    [(_, query, _)] = [r for r in server.requests if r[0].endswith("/span_annotations")]
    assert sorted(query["span_ids"]) == sorted([ROOT, CHILD]) and query["limit"] == ["1000"]
    assert "include_annotation_names" not in query

    refusing = stub(lambda path, query: (401, {}, b'{"detail": "Invalid token"}'))
    with pytest.raises(PhoenixError) as refused:
        read_phoenix_labels(refusing.url, "p", None, [])
    assert str(refused.value) == (
        f"Phoenix at {refusing.url}: GET /v1/projects/p: HTTP 401: Invalid token (PHOENIX_API_KEY was refused)"
    )
    assert KEY not in str(refused.value)


def test_a_redirect_is_not_followed_and_the_key_does_not_go_with_it(stub, monkeypatch):
    monkeypatch.setenv("PHOENIX_API_KEY", KEY)
    elsewhere = stub(phoenix_like([]))
    redirecting = stub(lambda path, query: (307, {"Location": f"{elsewhere.url}{path}?secret=1"}, b""))
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(redirecting.url, "p", None, [])
    assert str(raised.value) == (
        f"Phoenix at {redirecting.url}: GET /v1/projects/p: HTTP 307 (a redirect to {elsewhere.url}/v1/projects/p, "
        "not followed: give that URL)"
    )
    assert elsewhere.requests == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:6006", "--phoenix takes Phoenix's http:// or https:// URL, got '127.0.0.1:6006'"),
        ("ftp://host/x", "--phoenix takes Phoenix's http:// or https:// URL, got 'ftp://host/x'"),
        ("http://me:pw@host:6006", "--phoenix http://host:6006: credentials go in PHOENIX_API_KEY, not in the URL"),
    ],
)
def test_a_url_that_is_not_phoenixs_is_refused_without_its_credentials(url, message):
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(url, "p", None, [])
    assert str(raised.value) == message


def test_a_server_that_is_not_phoenix_is_said_so_in_one_line(stub):
    html = stub(lambda path, query: (200, {"Content-Type": "text/html"}, b"<html>\n<body>Grafana</body></html>"))
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(html.url, "p", None, [])
    assert str(raised.value) == (
        f"{html.url} does not answer as Phoenix's REST API does: GET /v1/projects/p answered "
        "'<html>\\n<body>Grafana</body></html>', not JSON"
    )
    assert "\n" not in str(raised.value)


def test_a_cursor_that_repeats_stops_the_read(stub):
    server = stub(phoenix_like([human("a1", name="m", result={"label": "pass"})], pages={"": "c1", "c1": "c1"}))
    with pytest.raises(PhoenixError, match="gave the same page cursor twice"):
        read_phoenix_labels(server.url, "p", None, [])


def test_pages_are_followed_and_an_annotation_seen_twice_counts_once(stub):
    first = [human("a1", name="m", result={"label": "pass"}), human("a2", name="m", result={"label": "fail"})]
    pages = {"": "c1", "c1": "c2"}  # three pages, each the same two annotations
    server = stub(phoenix_like(first, pages))
    labels = read_phoenix_labels(server.url, "p", None, problems := [])
    assert problems == [] and [x.source for x in labels] == ["phoenix:a1", "phoenix:a2"]
    cursors = [q.get("cursor") for p, q, _ in server.requests if p.endswith("/span_annotations")]
    assert cursors == [None, ["c1"], ["c2"]]


def test_a_slow_phoenix_times_out_in_one_line(stub, monkeypatch):
    monkeypatch.setattr(phoenix_labels, "TIMEOUT_S", 0.2)
    release = threading.Event()

    def slow(path: str, query: dict) -> Reply:
        release.wait(5)
        return ok({})

    server = stub(slow)
    try:
        with pytest.raises(PhoenixError) as raised:
            read_phoenix_labels(server.url, "p", None, [])
    finally:
        release.set()
    assert str(raised.value) == f"cannot reach Phoenix at {server.url}: no answer within 0.2 s"


def test_a_project_name_phoenix_cannot_look_up_by_path_is_found_in_the_list(stub):
    def answer(path: str, query: dict) -> Reply:
        if path == "/v1/projects":
            projects = [{"name": "team/agent", "id": "UHJvamVjdDoy"}, {"name": "other", "id": "UHJvamVjdDoz"}]
            return ok({"data": projects, "next_cursor": None})
        if path == "/v1/annotation_configs":
            return 404, {}, b"Not Found"  # a Phoenix before annotation configs
        if path.startswith("/v1/projects/UHJvamVjdDoy/"):
            return ok({"data": [], "next_cursor": None})
        return 404, {}, b"Not Found"

    server = stub(answer)
    problems: list[str] = []
    assert read_phoenix_labels(server.url, "team/agent", None, problems) == []
    assert problems == [
        "phoenix: no human annotation on the 0 spans of project 'team/agent' (0 LLM or CODE annotations not compared)"
    ]
    assert not any(path.startswith("/v1/projects/team") for path, _, _ in server.requests)
    with pytest.raises(PhoenixError, match=r"has no project 'nope' \(its projects: other, team/agent\)"):
        read_phoenix_labels(server.url, "nope", None, [])


def test_named_annotations_are_asked_for_by_name_and_a_name_none_has_is_a_problem(stub):
    annotations = [
        human("a1", name="Correctness", result={"label": "incorrect", "explanation": "wrong city"}),
        human("a2", name="task_completion", result={"label": "pass"}, annotator_kind="LLM"),
    ]
    server = stub(phoenix_like(annotations))
    names = {"Correctness": "task_completion", "Corectness": "task_completion"}
    [label] = read_phoenix_labels(server.url, "p", names, problems := [])
    assert (label.metric, label.label, label.note, label.annotator) == ("task_completion", "fail", "wrong city", None)
    assert problems == ["phoenix: no human annotation named 'Corectness' on the 2 spans of project 'p'"]
    for path, query, _ in server.requests:
        if path.endswith("_annotations"):
            assert sorted(query["include_annotation_names"]) == ["Corectness", "Correctness"]


# Hostile or broken servers: each answer is bounded in time, size and pages, and what
# Phoenix echoes is redacted.


def test_a_phoenix_trickling_its_answer_times_out_after_the_timeout_not_the_trickle(monkeypatch):
    monkeypatch.setattr(phoenix_labels, "TIMEOUT_S", 1.0)
    body = json.dumps({"data": {"id": "UHJvamVjdDox", "name": "p"}}).encode()
    with HostileServer(lambda request: trickle(request, body, every_s=0.25)) as server:  # about 12 s of answer
        started = time.monotonic()
        with pytest.raises(PhoenixError) as raised:
            read_phoenix_labels(server.url, "p", None, [])
        elapsed = time.monotonic() - started
    assert str(raised.value) == f"cannot reach Phoenix at {server.url}: no answer within 1 s"
    assert elapsed < 2.0


def test_a_page_past_the_size_bound_is_asked_again_smaller_then_refused_without_reading_it_all(monkeypatch):
    def respond(request: Request) -> None:
        if request.path == "/v1/projects/p":
            answer_json(request, {"data": {"id": "UHJvamVjdDox", "name": "p"}})
        elif request.path.startswith("/v1/annotation_configs"):
            answer_json(request, {"data": [], "next_cursor": None})
        else:  # every page of spans: 200 MB of {}
            huge(request, b'{"data": [{}', b",{}", 200 << 20, b'], "next_cursor": null}')

    with HostileServer(respond) as server:
        tracemalloc.start()
        try:
            with pytest.raises(PhoenixError) as raised:
                read_phoenix_labels(server.url, "p", None, [])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert str(raised.value) == (
        f"Phoenix at {server.url}: GET /v1/projects/UHJvamVjdDox/spans answered more than "
        f"{phoenix_labels.MAX_PAGE_BYTES:,} bytes for a page of {phoenix_labels.MIN_PAGE} items"
    )
    assert peak < 3 * phoenix_labels.MAX_PAGE_BYTES, peak
    limits = [parse_qs(urlsplit(path).query)["limit"] for _, path in server.requests if "/spans" in path]
    assert limits == [["1000"], ["500"], ["250"], ["125"], ["62"], ["31"], ["15"], ["10"]]


def test_a_page_of_many_tiny_objects_is_refused_before_it_is_parsed():
    # 4 MB within the size bound, but a million objects
    def respond(request: Request) -> None:
        if request.path == "/v1/projects/p":
            answer_json(request, {"data": {"id": "UHJvamVjdDox", "name": "p"}})
        elif request.path.startswith("/v1/annotation_configs"):
            huge(request, b'{"data": [{}', b",{}", 3 << 20, b'], "next_cursor": null}')

    with HostileServer(respond) as server:
        with pytest.raises(PhoenixError, match=r"GET /v1/annotation_configs answered more than 500,000 objects"):
            read_phoenix_labels(server.url, "p", None, [])


def test_a_list_that_keeps_giving_new_cursors_ends_at_the_page_bound(stub, monkeypatch):
    monkeypatch.setattr(phoenix_labels, "MAX_PAGES", 30)
    pages = {"": "c0", **{f"c{i}": f"c{i + 1}" for i in range(1000)}}
    server = stub(phoenix_like([human("a1", name="m", result={"label": "pass"})], pages=pages))
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(server.url, "p", None, [])
    assert str(raised.value) == (
        f"{server.url} does not answer as Phoenix's REST API does: "
        "GET /v1/projects/UHJvamVjdDox/span_annotations gave more than 30 pages, each with a new cursor"
    )
    assert sum(path.endswith("/span_annotations") for path, _, _ in server.requests) == 30


def test_a_cursor_that_comes_back_after_others_stops_the_read(stub):
    server = stub(
        phoenix_like([human("a1", name="m", result={"label": "pass"})], pages={"": "c1", "c1": "c2", "c2": "c1"})
    )
    with pytest.raises(PhoenixError, match="gave the same page cursor twice"):
        read_phoenix_labels(server.url, "p", None, [])


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_a_phoenix_error_echoing_a_secret_is_redacted_and_bounded(stub, content_type):
    key = "sk-proj-" + "A1b2C3d4" * 8
    detail = f"upstream refused api_key={key} " + "x" * 1500  # whole in the 2,000 bytes read of an error
    body = json.dumps({"detail": detail}) if content_type == "application/json" else detail
    server = stub(lambda path, query: (500, {"Content-Type": content_type}, body.encode()))
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(server.url, "p", None, [])
    message = str(raised.value)
    assert key not in message and "sk-proj-" not in message and "[redacted" in message
    assert message.startswith(f"Phoenix at {server.url}: GET /v1/projects/p: HTTP 500: upstream refused api_key=")
    assert len(message) < 400


def test_a_non_json_answer_echoing_a_secret_is_redacted(stub):
    key = "sk-proj-" + "Z9y8X7w6" * 4
    server = stub(lambda path, query: (200, {"Content-Type": "text/html"}, f"<p>Bearer {key}</p>".encode()))
    with pytest.raises(PhoenixError) as raised:
        read_phoenix_labels(server.url, "p", None, [])
    assert key not in str(raised.value) and "not JSON" in str(raised.value)
