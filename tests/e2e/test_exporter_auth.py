"""Exporters with `auth: {authenticator: bearertokenauth/...}` send the token; a second
spanscore whose receivers check it is the loopback backend: the right token is
delivered, a wrong one is refused for good, and no log shows either."""

from __future__ import annotations

import logging

import pytest

from tests.support.bearer_token import TOKEN, WRONG, auth_config
from tests.support.otlp_client import send
from tests.support.running import wait_until
from tests.support.spans import new_trace_id, request_of, span


def forwarding(backend, exporter: str, token: str, headers: str = "") -> str:
    endpoint = (
        f"127.0.0.1:{backend.grpc_port}, tls: {{insecure: true}}"
        if exporter == "otlp"
        else f"http://127.0.0.1:{backend.http_port}"
    )
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors: {{assembler: {{trace_wait: 20ms}}}}
exporters:
  {exporter}: {{endpoint: {endpoint}, auth: {{authenticator: bearertokenauth/backend}}{headers},
               retry_on_failure: {{initial_interval: 50ms, max_elapsed_time: 1s}}}}
extensions:
  bearertokenauth/backend: {{token: '{token}'}}
service:
  extensions: [bearertokenauth/backend]
  pipelines: {{traces: {{receivers: [otlp], exporters: [{exporter}]}}}}
"""


@pytest.fixture
def backend(sink, start_collector):
    """A spanscore that takes only requests carrying TOKEN, forwarding to `sink`."""
    return start_collector(auth_config(sink))


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_the_token_is_sent_and_the_backend_takes_the_spans(exporter, backend, sink, start_collector):
    # A hand-written authorization header gives way to the authenticator's.
    front = start_collector(forwarding(backend, exporter, TOKEN, ", headers: {Authorization: 'Bearer stale'}"))
    send(front.grpc_port, request_of([span(new_trace_id(), f"through {exporter}")]))
    assert wait_until(lambda: [s.name for s in sink.spans()] == [f"through {exporter}"])
    assert backend.pipeline.counts.received_spans == 1


@pytest.mark.parametrize("exporter", ["otlp", "otlphttp"])
def test_a_wrong_token_is_refused_for_good_and_logged_without_it(exporter, backend, sink, start_collector, caplog):
    caplog.set_level(logging.DEBUG)
    front = start_collector(forwarding(backend, exporter, WRONG))
    send(front.grpc_port, request_of([span(new_trace_id(), "refused")]))
    dropping = front.pipeline.exporters[0]
    assert wait_until(lambda: dropping.dropped_spans == 1)
    assert "(not retryable)" in caplog.text  # 401 and UNAUTHENTICATED are final, not retried
    assert backend.pipeline.counts.received_spans == 0 and sink.spans() == []
    assert TOKEN not in caplog.text and WRONG not in caplog.text


def test_the_token_reaches_the_backend_as_a_header(sink, start_collector):
    front = start_collector(forwarding(sink, "otlp", TOKEN))
    send(front.grpc_port, request_of([span(new_trace_id(), "seen")]))
    assert wait_until(lambda: len(sink.headers) == 1)
    assert sink.headers[0]["authorization"] == f"Bearer {TOKEN}"
