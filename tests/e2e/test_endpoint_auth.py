"""`/metrics` and the health endpoint behind the receivers' `bearertokenauth`: without the
token, or with a wrong one, 401 and the challenge; with it, the usual answer. Without
`auth` (the default) both answer anyone. Credentials sent twice are refused by both."""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

import pytest

from tests.support.bearer_token import TOKEN, WRONG, auth_config
from tests.support.ports import free_port


def get(url: str, token: str | None) -> tuple[int, dict[str, str], bytes]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def start_endpoints(sink, start_collector, with_auth: bool) -> tuple[int, int]:
    """A collector with `/metrics` and the health endpoint (behind `bearertokenauth` when
    `with_auth`): their ports."""
    prometheus_port = free_port()
    auth = ", auth: {authenticator: bearertokenauth}" if with_auth else ""
    text = (
        auth_config(sink)
        .replace("exporters:\n", f"exporters:\n  prometheus: {{endpoint: 127.0.0.1:{prometheus_port}{auth}}}\n", 1)
        .replace("extensions:\n", f"extensions:\n  health_check: {{endpoint: 127.0.0.1:0{auth}}}\n", 1)
        .replace("  extensions: [bearertokenauth]", "  extensions: [bearertokenauth, health_check]")
    )
    text += "    metrics: {exporters: [prometheus]}\n"
    collector = start_collector(text)
    health = next(e for e in collector.service.extensions if hasattr(e, "pipeline_ready"))
    return prometheus_port, health.port


@pytest.mark.parametrize("with_auth", [True, False])
def test_metrics_and_health_take_the_same_auth_as_the_receivers(sink, start_collector, with_auth):
    prometheus_port, health_port = start_endpoints(sink, start_collector, with_auth)
    endpoints = (f"http://127.0.0.1:{prometheus_port}/metrics", f"http://127.0.0.1:{health_port}/")
    for url in endpoints:
        status, _, body = get(url, TOKEN)
        assert status == 200 and body
        for token in (None, WRONG):
            status, headers, body = get(url, token)
            if with_auth:
                assert (status, headers["WWW-Authenticate"]) == (401, "Bearer")
                assert body == b"missing or invalid credentials\n"
            else:
                assert status == 200
    assert b"otelcol_receiver_accepted_spans" in get(endpoints[0], TOKEN)[2]
    assert b"Server available" in get(endpoints[1], TOKEN)[2]


def get_with_two_tokens(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.putrequest("GET", path)
        for token in (TOKEN, TOKEN):
            connection.putheader("Authorization", f"Bearer {token}")
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_metrics_and_health_refuse_credentials_sent_twice(sink, start_collector):
    prometheus_port, health_port = start_endpoints(sink, start_collector, with_auth=True)
    assert get_with_two_tokens(health_port, "/") == (
        401,
        b"more than one authorization header; send the credentials once\n",
    )
    # The scrape endpoint's WSGI server joins the two into one value, which no token is.
    assert get_with_two_tokens(prometheus_port, "/metrics") == (401, b"missing or invalid credentials\n")
