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


def listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")
