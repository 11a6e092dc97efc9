"""`host:port` endpoints as written in config (`127.0.0.1:4317`, `[::1]:4318`, `:4317`)."""

from __future__ import annotations


def split_host_port(endpoint: str) -> tuple[str, int]:
    """Host (empty for all interfaces) and port; raises ValueError with the reason."""
    if endpoint.startswith("["):
        host, sep, rest = endpoint[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{endpoint!r} is not [host]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = endpoint.rpartition(":")
        if not sep:
            raise ValueError(f"{endpoint!r} has no port; write host:port, e.g. 127.0.0.1:4317")
        if ":" in host:
            raise ValueError(f"{endpoint!r}: put IPv6 addresses in brackets, e.g. [::1]:4317")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{endpoint!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{endpoint!r}: port {port} is out of range")
    return host, port


def validate_endpoint(endpoint: str) -> str:
    split_host_port(endpoint)
    return endpoint
