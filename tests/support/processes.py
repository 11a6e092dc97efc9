"""`spanscore` as a child process, as a user starts it: the command, the checkout it runs
from, a `spanscore run` that is up once its receiver listens, and a process's memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.running import wait_until

SPANSCORE = [sys.executable, "-m", "spanscore"]
ROOT = Path(__file__).resolve().parents[2]


def run_spanscore(*arguments: str | Path, cwd: Path = ROOT, timeout: float = 60) -> subprocess.CompletedProcess:
    """`spanscore <arguments>` to its end, its output captured as text."""
    return subprocess.run(
        [*SPANSCORE, *map(str, arguments)], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def launch(config: Path, port: int) -> subprocess.Popen:
    """`spanscore run --config config`, once its receiver on `port` listens."""
    process = subprocess.Popen(
        [*SPANSCORE, "run", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    ready = wait_until(lambda: process.poll() is not None or listening(port), timeout_s=60)
    assert ready and process.poll() is None, (
        process.communicate(timeout=10)[1] if process.poll() is not None else "slow"
    )
    return process


def start_run(config: Path) -> subprocess.Popen:
    """`spanscore run --config config` with its output piped, unbuffered, to read after it stops."""
    return subprocess.Popen(
        [*SPANSCORE, "run", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def start_default_run(cwd: Path, environ: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """`spanscore run` from `cwd` (the built-in config unless `cwd` has one) on free ports,
    output piped and unbuffered; once its OTLP/HTTP receiver listens: (process, its port)."""
    from tests.support.ports import free_port

    http = free_port()
    environ = {
        **environ,
        "PYTHONUNBUFFERED": "1",
        "SPANSCORE_GRPC_ENDPOINT": f"127.0.0.1:{free_port()}",
        "SPANSCORE_HTTP_ENDPOINT": f"127.0.0.1:{http}",
        "SPANSCORE_PROMETHEUS_ENDPOINT": f"127.0.0.1:{free_port()}",
    }
    process = subprocess.Popen(
        [*SPANSCORE, "run"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    )
    if not wait_until(lambda: process.poll() is not None or listening(http), timeout_s=60) or process.poll():
        process.kill()
        raise AssertionError(f"spanscore run did not come up:\n{process.communicate(timeout=10)[1]}")
    return process, http


def run_default_on(request: Path, cwd: Path, environ: dict[str, str]) -> subprocess.CompletedProcess:
    """The README's walk-through: `spanscore run` from `cwd` (see `start_default_run`), sent
    the OTLP/JSON `request`, stopped with SIGTERM once its traces are in ./scored.jsonl."""
    import json
    import signal

    process, http = start_default_run(cwd, environ)
    scored = cwd / "scored.jsonl"
    try:
        body = request.read_bytes()
        post_otlp_json(http, body)
        # The session's traces leave after trace_wait (a model may load first), all in one
        # line of the file; the session's carrier only at SIGTERM.
        sent = _span_count(json.loads(body))
        assert wait_until(lambda: _spans_written(scored) >= sent, timeout_s=60)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _span_count(request: dict) -> int:
    return sum(
        len(scope.get("spans", [])) for rs in request.get("resourceSpans", []) for scope in rs.get("scopeSpans", [])
    )


def _spans_written(path: Path) -> int:
    """Spans in a file exporter's output (one OTLP/JSON request per line); 0 before it exists."""
    import json

    if not path.exists():
        return 0
    return sum(_span_count(json.loads(line)) for line in path.read_text().splitlines() if line.strip())


def post_otlp_json(port: int, body: bytes) -> None:
    """POST one OTLP/JSON request to the OTLP/HTTP receiver on `port`; it must take it (200)."""
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
