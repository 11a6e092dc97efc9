"""A real Arize Phoenix server on loopback, as a subprocess, for end-to-end tests.

Phoenix pins its own versions of libraries spanscore also uses, so it lives in a
virtualenv of its own: `SPANSCORE_PHOENIX_PYTHON` names that venv's python (CI makes
one); otherwise a `phoenix` importable from the test interpreter is used. The server
gets free loopback ports, a fresh working directory (its SQLite database) and none of
the caller's PHOENIX_* variables, so it never reaches a database, collector or port
other than its own. It stores spans and annotations asynchronously: read back with
`wait_for`, never once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support.ports import free_port

PYTHON_ENV = "SPANSCORE_PHOENIX_PYTHON"
REQUIRE_ENV = "SPANSCORE_REQUIRE_PHOENIX"
START_TIMEOUT_S = 90.0  # about 15 s on an idle 2-core machine, mostly imports
T = TypeVar("T")


def phoenix_python() -> tuple[str | None, str]:
    """The python to run Phoenix with, or None and why there is none. A PYTHON_ENV that
    names no file raises: it was asked for, so its absence is an error, not a skip."""
    configured = os.environ.get(PYTHON_ENV)
    if configured:
        if not Path(configured).is_file():
            raise FileNotFoundError(f"{PYTHON_ENV}={configured} does not exist")
        # Absolute, for the server runs in its own directory; not resolved, for a venv's
        # python is a symlink to the base interpreter, which would leave the venv.
        return os.path.abspath(configured), ""
    if importlib.util.find_spec("phoenix") is not None and importlib.util.find_spec("phoenix.server") is not None:
        return sys.executable, ""
    return None, (
        f"no Arize Phoenix: set {PYTHON_ENV} to the python of a venv with arize-phoenix "
        "(python3 -m venv /tmp/phoenix-venv && /tmp/phoenix-venv/bin/pip install arize-phoenix)"
    )


class PhoenixServer:
    """`python -m phoenix.server.main serve` on 127.0.0.1, stopped by `stop()` or `with`."""

    def __init__(self, python: str, settings: dict[str, str] | None = None, working_dir: Path | None = None):
        """`settings`: more PHOENIX_* variables, such as authentication's. `working_dir`:
        a directory to keep (its database included) instead of a fresh one removed at stop."""
        self.keep_directory = working_dir is not None
        self.directory = working_dir if working_dir is not None else Path(tempfile.mkdtemp(prefix="spanscore-phoenix-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        environment.update(
            {
                "PHOENIX_HOST": "127.0.0.1",
                "PHOENIX_PORT": str(self.port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_WORKING_DIR": str(self.directory),
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
                **(settings or {}),
            }
        )
        self.log = self.directory / "phoenix.log"
        self.started_in_s: float | None = None
        started = time.monotonic()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [python, "-m", "phoenix.server.main", "serve"],
                env=environment,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started

    def _wait_healthy(self, started: float) -> None:
        while time.monotonic() - started < START_TIMEOUT_S:
            if self.process.poll() is not None:
                raise RuntimeError(f"Phoenix exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Phoenix not healthy after {START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session: only what it started
                self.process.wait(timeout=5)
        if not self.keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # The REST and GraphQL APIs ---------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        """GET `path` with `params` (lists repeat the key); the JSON body. HTTP errors raise
        with Phoenix's reason."""
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise AssertionError(f"GET {path} {params}: HTTP {error.code}: {error.read()[:500]!r}") from None

    def spans(self, project: str, **params: Any) -> list[dict[str, Any]]:
        """Spans of `project` (REST filters as `params`); none while the project does not
        exist, as until its first span is stored."""
        if not any(p["name"] == project for p in self.get("/v1/projects", limit=1000)["data"]):
            return []
        return self.get(f"/v1/projects/{project}/spans", limit=1000, **params)["data"]

    def graphql(self, query: str, **variables: Any) -> Any:
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query, "variables": variables}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.load(response)
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def span_filter(self, project: str, condition: str) -> list[str]:
        """Span ids of `project` matching a span filter condition (GraphQL `filterCondition`)."""
        project_id = self.get(f"/v1/projects/{project}")["data"]["id"]
        data = self.graphql(
            """
            query($id: ID!, $condition: String!) {
              node(id: $id) { ... on Project {
                spans(first: 100, filterCondition: $condition) { edges { node { context { spanId } } } } } }
            }""",
            id=project_id,
            condition=condition,
        )
        return sorted(edge["node"]["context"]["spanId"] for edge in data["node"]["spans"]["edges"])

    def span_annotations(self, project: str, span_ids: list[str]) -> list[dict[str, Any]]:
        return self.get(f"/v1/projects/{project}/span_annotations", span_ids=span_ids, limit=1000)["data"]


def wait_for(read: Callable[[], T], done: Callable[[T], bool], timeout_s: float, interval_s: float = 0.25) -> T:
    """Poll `read` until `done` says its value is complete; the last value either way."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if done(value) or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)
