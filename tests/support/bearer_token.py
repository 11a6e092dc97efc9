"""Receivers behind `bearertokenauth`: the token, one a character off, and the config that
puts both receivers of `sink_config` behind it."""

from __future__ import annotations

from tests.support.running import sink_config

TOKEN = "s3cret-7f3a9c1e5b2d4f60"
WRONG = "s3cret-7f3a9c1e5b2d4f61"  # one character off


def auth_config(sink, extension: str = f"bearertokenauth: {{token: '{TOKEN}'}}") -> str:
    auth = "auth: {authenticator: bearertokenauth}"
    return (
        sink_config(sink, assembler="trace_wait: 20ms")
        .replace("grpc: {endpoint: 127.0.0.1:0}", f"grpc: {{endpoint: 127.0.0.1:0, {auth}}}")
        .replace("http: {endpoint: 127.0.0.1:0}", f"http: {{endpoint: 127.0.0.1:0, {auth}}}")
        .replace("service:\n", f"extensions:\n  {extension}\nservice:\n  extensions: [bearertokenauth]\n")
    )
