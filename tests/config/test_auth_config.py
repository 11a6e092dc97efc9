"""`auth: {authenticator: ...}` references are checked with the config: a name that is not
defined, not started by `service.extensions`, or not an authenticator is an error naming
its key; a token is never quoted back in an error."""

from __future__ import annotations

import pytest

from spanscore.config.loader import ConfigError, parse_config
from tests.support.factories import TEST_FACTORIES


def config(
    receiver_auth: str = "bearertokenauth/agents",
    exporter_auth: str | None = None,
    extensions: str = "bearertokenauth/agents: {token: t0k3n}",
    listed: str = "[bearertokenauth/agents]",
    http: str = "",
) -> str:
    exporter = "" if exporter_auth is None else f", auth: {{authenticator: {exporter_auth}}}"
    return f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:0, auth: {{authenticator: {receiver_auth}}}}}
      http: {{endpoint: 127.0.0.1:0{http}}}
exporters:
  otlp: {{endpoint: 127.0.0.1:14317, tls: {{insecure: true}}{exporter}}}
extensions:
  {extensions}
  health_check: {{}}
service:
  extensions: {listed}
  pipelines: {{traces: {{receivers: [otlp], exporters: [otlp]}}}}
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_config(text, factories=TEST_FACTORIES)
    return error.value.problems


def test_a_named_authenticator_that_is_defined_and_listed_is_accepted():
    parsed = parse_config(config(exporter_auth="bearertokenauth/agents"), factories=TEST_FACTORIES)
    assert [c.id for c in parsed.extensions] == ["bearertokenauth/agents"]


def test_an_authenticator_that_is_not_defined_is_an_error():
    assert problems_of(config(receiver_auth="bearertokenauth/typo")) == [
        "receivers.otlp.protocols.grpc.auth.authenticator: 'bearertokenauth/typo' is not defined under extensions"
    ]


def test_an_authenticator_not_listed_in_service_extensions_is_an_error():
    assert problems_of(config(listed="[]")) == [
        "receivers.otlp.protocols.grpc.auth.authenticator: 'bearertokenauth/agents' is not listed in service.extensions"
    ]


def test_an_extension_that_does_not_authenticate_is_an_error():
    assert problems_of(config(receiver_auth="health_check", listed="[health_check]")) == [
        "receivers.otlp.protocols.grpc.auth.authenticator: 'health_check' is not an authenticator that checks "
        "requests received"
    ]


def test_exporter_references_are_checked_too():
    assert problems_of(config(exporter_auth="bearertokenauth/backend")) == [
        "exporters.otlp.auth.authenticator: 'bearertokenauth/backend' is not defined under extensions"
    ]


def test_the_http_protocol_is_checked_on_its_own():
    problems = problems_of(config(http=", auth: {authenticator: bearertokenauth}"))
    assert problems == [
        "receivers.otlp.protocols.http.auth.authenticator: 'bearertokenauth' is not defined under extensions"
    ]


def test_a_token_read_as_a_number_is_refused_without_being_quoted():
    problems = problems_of(config(extensions="bearertokenauth/agents: {token: 73914402}"))
    assert problems == [
        "extensions.bearertokenauth/agents: token must be text: quote it, or keep it in a file named by filename"
    ]
    assert "73914402" not in " ".join(problems)


def test_tls_files_must_exist(tmp_path):
    missing = tmp_path / "server.pem"
    problems = problems_of(config(http=f", tls: {{cert_file: '{missing}', key_file: '{missing}'}}"))
    assert problems == [
        f"receivers.otlp.protocols.http.tls: cert_file '{missing}' does not exist; key_file '{missing}' does not exist"
    ]


def test_the_scrape_and_health_endpoints_auth_must_check_requests_received():
    text = (
        config(extensions="bearertokenauth/agents: {token: t0k3n}", listed="[bearertokenauth/agents, health_check]")
        .replace("  health_check: {}", "  health_check: {auth: {authenticator: bearertokenauth/typo}}")
        .replace(
            "exporters:\n",
            "exporters:\n  prometheus: {endpoint: 127.0.0.1:0, auth: {authenticator: health_check}}\n",
        )
        .replace("pipelines: {", "pipelines: {metrics: {exporters: [prometheus]}, ")
    )
    assert sorted(problems_of(text)) == [
        "exporters.prometheus.auth.authenticator: 'health_check' is not an authenticator that checks requests received",
        "extensions.health_check.auth.authenticator: 'bearertokenauth/typo' is not defined under extensions",
    ]
