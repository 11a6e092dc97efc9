"""Loopback ports for servers a test starts on a port of its choosing."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on (until someone binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
