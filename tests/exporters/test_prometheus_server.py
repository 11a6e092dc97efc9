"""The scrape endpoint's own bounds: a connection that sends nothing is closed after the
handler's timeout, and past the cap a new connection is closed unanswered."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from spanscore.exporters import prometheus
from spanscore.exporters.prometheus import PrometheusExporterConfig, PrometheusReader


@pytest.fixture
def reader(monkeypatch):
    monkeypatch.setattr(prometheus._QuietHandler, "timeout", 0.5)
    monkeypatch.setattr(prometheus._BoundedServer, "max_connections", 3)
    reader = PrometheusReader("prometheus", PrometheusExporterConfig(endpoint="127.0.0.1:0"))
    yield reader
    reader.shutdown()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (reads EOF or a reset)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_silent_connection_is_closed_after_the_timeout(reader):
    with socket.create_connection(("127.0.0.1", reader.port)) as silent:
        started = time.monotonic()
        assert closed_within(silent, 5.0)
        assert 0.4 <= time.monotonic() - started < 3.0


def test_past_the_cap_a_connection_is_closed_and_a_freed_slot_serves_again(reader):
    held = [socket.create_connection(("127.0.0.1", reader.port)) for _ in range(3)]
    try:
        time.sleep(0.1)  # the three are taken up by their threads
        with socket.create_connection(("127.0.0.1", reader.port)) as extra:
            assert closed_within(extra, 0.3)  # closed at once, long before the 0.5 s timeout
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.7)  # the held ones' threads end
    with urllib.request.urlopen(f"http://127.0.0.1:{reader.port}/metrics", timeout=5) as response:
        assert response.status == 200
