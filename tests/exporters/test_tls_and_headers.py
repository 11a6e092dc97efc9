"""Exporters speak TLS with a configured CA and send the configured headers."""

from __future__ import annotations

import pytest

from tests.support.certificates import make_certificates
from tests.support.otlp_client import send
from tests.support.otlp_sink import OtlpSink
from tests.support.running import wait_until
from tests.support.spans import new_trace_id, request_of, span


@pytest.fixture
def tls_sink(loop_thread, tmp_path):
    certificates = make_certificates(tmp_path)
    backend = loop_thread.run(
        OtlpSink().start(certificate=(certificates.server_key_pem, certificates.server_chain_pem))
    )
    backend.ca_file = certificates.ca_file
    yield backend
    loop_thread.run(backend.stop())


def config(exporter: str) -> str:
    return f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}}}}}}}
processors: {{assembler: {{trace_wait: 20ms}}}}
exporters:
  {exporter}
service: {{pipelines: {{traces: {{receivers: [otlp], exporters: [{exporter.split(":")[0]}]}}}}}}
"""


def test_otlp_grpc_over_tls_with_a_ca_file_and_headers(tls_sink, start_collector):
    collector = start_collector(
        config(
            f"otlp: {{endpoint: 'localhost:{tls_sink.grpc_port}', tls: {{ca_file: '{tls_sink.ca_file}'}}, "
            f"headers: {{X-Tenant: acme, authorization: 'Bearer s3cret'}}}}"
        )
    )
    send(collector.grpc_port, request_of([span(new_trace_id(), "over tls")]))
    assert wait_until(lambda: [s.name for s in tls_sink.spans()] == ["over tls"])
    assert tls_sink.headers[0]["x-tenant"] == "acme"
    assert tls_sink.headers[0]["authorization"] == "Bearer s3cret"


def test_otlphttp_over_https_with_a_ca_file_and_headers(tls_sink, start_collector):
    collector = start_collector(
        config(
            f"otlphttp: {{endpoint: 'https://127.0.0.1:{tls_sink.http_port}', tls: {{ca_file: '{tls_sink.ca_file}'}}, "
            f"headers: {{X-Tenant: acme}}, encoding: json}}"
        )
    )
    send(collector.grpc_port, request_of([span(new_trace_id(), "over https")]))
    assert wait_until(lambda: [s.name for s in tls_sink.spans()] == ["over https"])
    assert tls_sink.headers[0]["x-tenant"] == "acme"
    assert tls_sink.headers[0]["content-type"] == "application/json"
    assert tls_sink.headers[0]["content-encoding"] == "gzip"


def test_untrusted_server_certificate_is_not_accepted(tls_sink, start_collector):
    collector = start_collector(
        config(
            f"otlphttp: {{endpoint: 'https://127.0.0.1:{tls_sink.http_port}', "
            f"retry_on_failure: {{initial_interval: 50ms, max_elapsed_time: 300ms}}}}"
        )
    )
    send(collector.grpc_port, request_of([span(new_trace_id(), "must not leak")]))
    exporter = collector.pipeline.exporters[0]
    assert wait_until(lambda: exporter.dropped_spans == 1)
    assert tls_sink.spans() == []
