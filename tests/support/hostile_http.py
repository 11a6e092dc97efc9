"""A loopback HTTP server that answers the way broken or hostile servers do, for clients'
fault tests (the judge's OpenAI client, `agree --phoenix`): an answer trickled a byte at
a time, a 200 that is an HTML page, a body of tens of megabytes.

`HostileServer(respond)` calls `respond(request)` for every request, on the server's own
thread; `respond` writes the whole answer itself through the `http.server` handler it is
given (its `path`, `command`, `headers` and `body` read) and may block as long as it likes.
The helpers below write the usual shapes. A client that hangs up mid-answer is not an
error here.

Threading: one thread per connection; `requests` may be read from any thread.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from typing import Any

Respond = Callable[["Request"], None]


class Request(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body: bytes = b""
    respond: Respond

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        try:
            self.server.respond(self)  # type: ignore[attr-defined]
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what these tests want of it
        self.close_connection = True

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class HostileServer:
    """Start as a context manager; `url` is `http://127.0.0.1:<port>`."""

    def __init__(self, respond: Respond):
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Request)
        self._server.daemon_threads = True
        self._server.respond = respond  # type: ignore[attr-defined]
        self._server.requests = []  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        return list(self._server.requests)  # type: ignore[attr-defined]

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def answer(request: Request, status: int, body: bytes, content_type: str = "application/json") -> None:
    request.send_response(status)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def answer_json(request: Request, value: Any, status: int = 200) -> None:
    answer(request, status, json.dumps(value).encode())


def trickle(request: Request, body: bytes, every_s: float, content_type: str = "application/json") -> None:
    """A 200 whose body comes one byte every `every_s` seconds."""
    request.send_response(200)
    request.send_header("Content-Type", content_type)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.flush()
    for byte in body:
        request.wfile.write(bytes([byte]))
        request.wfile.flush()
        time.sleep(every_s)


def huge(request: Request, head: bytes, filler: bytes, size: int, tail: bytes = b"") -> None:
    """A 200 JSON body of about `size` bytes: `head`, `filler` repeated, `tail`; sent in
    chunks of a megabyte so the server holds little of it."""
    count = max(0, (size - len(head) - len(tail)) // len(filler))
    request.send_response(200)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(head) + count * len(filler) + len(tail)))
    request.end_headers()
    request.wfile.write(head)
    per_chunk = max(1, (1 << 20) // len(filler))
    chunk = filler * per_chunk
    for _ in range(count // per_chunk):
        request.wfile.write(chunk)
    request.wfile.write(filler * (count % per_chunk))
    request.wfile.write(tail)
