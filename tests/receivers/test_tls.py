"""The OTLP receivers over TLS, and mutual TLS: a client certificate from the configured
CA is required, and anything else is refused at the handshake, before OTLP is spoken."""

from __future__ import annotations

import socket
import ssl

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult

from spanscore.receivers.grpc_receiver import GrpcReceiver
from spanscore.receivers.http_receiver import HttpReceiver
from spanscore.receivers.tls import TlsServerConfig
from tests.support.certificates import Pki, make_pki
from tests.support.null_consumer import NullConsumer
from tests.support.running import sink_config, wait_until
from tests.support.sdk_export import EXPORTS


@pytest.fixture
def pki(tmp_path) -> Pki:
    return make_pki(tmp_path)


def tls_config(sink, pki: Pki, mutual: bool) -> str:
    client_ca = f", client_ca_file: '{pki.ca_file}'" if mutual else ""
    tls = f"tls: {{cert_file: '{pki.server_cert_file}', key_file: '{pki.server_key_file}'{client_ca}}}"
    return (
        sink_config(sink, assembler="trace_wait: 20ms")
        .replace("grpc: {endpoint: 127.0.0.1:0}", f"grpc: {{endpoint: 127.0.0.1:0, {tls}}}")
        .replace("http: {endpoint: 127.0.0.1:0}", f"http: {{endpoint: 127.0.0.1:0, {tls}}}")
    )


def port_of(collector, protocol: str) -> int:
    return collector.grpc_port if protocol == "grpc" else collector.http_port


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_client_trusting_the_ca_exports_over_tls(protocol, pki, sink, start_collector):
    collector = start_collector(tls_config(sink, pki, mutual=False))
    result = EXPORTS[protocol](port_of(collector, protocol), "over tls", ca_file=pki.ca_file)
    assert result is SpanExportResult.SUCCESS
    assert wait_until(lambda: [s.name for s in sink.spans()] == ["over tls"])


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_plaintext_client_is_not_served_by_a_tls_receiver(protocol, pki, sink, start_collector):
    collector = start_collector(tls_config(sink, pki, mutual=False))
    result = EXPORTS[protocol](port_of(collector, protocol), "in the clear", timeout_s=1)
    assert result is SpanExportResult.FAILURE
    assert collector.pipeline.counts.received_spans == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("client", ["from the CA", "none", "from another CA"])
def test_mutual_tls_takes_only_a_client_certificate_from_the_configured_ca(
    client, protocol, pki, sink, start_collector
):
    collector = start_collector(tls_config(sink, pki, mutual=True))
    files = {
        "from the CA": (pki.client_cert_file, pki.client_key_file),
        "none": (None, None),
        "from another CA": (pki.stranger_cert_file, pki.stranger_key_file),
    }[client]
    result = EXPORTS[protocol](
        port_of(collector, protocol),
        f"client {client}",
        ca_file=pki.ca_file,
        cert_file=files[0],
        key_file=files[1],
        timeout_s=1,
    )
    if client == "from the CA":
        assert result is SpanExportResult.SUCCESS
        assert wait_until(lambda: [s.name for s in sink.spans()] == ["client from the CA"])
    else:
        assert result is SpanExportResult.FAILURE
        assert collector.pipeline.counts.received_spans == 0
        assert sink.spans() == []


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("client", ["none", "from another CA"])
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["TLS1.2", "TLS1.3"])
def test_mutual_tls_refuses_at_the_handshake_with_no_reply(version, client, protocol, pki, sink, start_collector):
    collector = start_collector(tls_config(sink, pki, mutual=True))
    context = ssl.create_default_context(cafile=pki.ca_file)
    context.minimum_version = context.maximum_version = version
    context.set_alpn_protocols(["h2"] if protocol == "grpc" else ["http/1.1"])
    if client == "from another CA":
        context.load_cert_chain(pki.stranger_cert_file, pki.stranger_key_file)
    with socket.create_connection(("127.0.0.1", port_of(collector, protocol)), timeout=5) as raw:
        if version is ssl.TLSVersion.TLSv1_2:
            with pytest.raises(ssl.SSLError):
                context.wrap_socket(raw, server_hostname="localhost")
        else:
            # TLS 1.3 clients finish their side before the server has checked their
            # certificate; the server then closes without a byte of reply.
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
                try:
                    reply = tls.recv(1024)
                except ssl.SSLError:
                    reply = b""
                assert reply == b""
    assert collector.pipeline.counts.received_spans == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_unusable_tls_files_stop_the_start_with_their_names(protocol, pki, tmp_path):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a key")
    tls = TlsServerConfig(cert_file=str(pki.server_cert_file), key_file=str(garbage))
    receiver = (
        GrpcReceiver("127.0.0.1:0", 2**20, NullConsumer(), tls)
        if protocol == "grpc"
        else HttpReceiver("127.0.0.1", 0, "/v1/traces", 2**20, NullConsumer(), tls)
    )
    with pytest.raises(OSError, match=f"cannot load the TLS files {pki.server_cert_file}, {garbage}"):
        await receiver.start()
