"""Hands components the authenticator extensions their `auth:` settings name.

The config checked every reference (spanscore.core.auth); here the running extensions
are handed over. Receivers get the extensions themselves, by id, as they ask on every
request. Exporters get values: the authenticator's headers are added to the exporter's
`headers` once, before it is built, so its traces, score metrics and evaluation events
all carry them without the exporter knowing of extensions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from spanscore.config.loader import Component as Configured
from spanscore.config.loader import Config
from spanscore.core.auth import ClientAuthenticator, auth_references
from spanscore.core.component import Component
from spanscore.core.consumer import TracesConsumer


def create_receiver(receiver: Configured, consumer: TracesConsumer, extensions: Mapping[str, Component]) -> Component:
    """Build `receiver`, with `authenticators=` (extensions by id) when its config names any."""
    if auth_references(receiver.config, receiver.id):
        return receiver.factory.create(receiver.id, receiver.config, consumer, authenticators=extensions)
    return receiver.factory.create(receiver.id, receiver.config, consumer)


def with_client_auth(config: Config, extensions: Mapping[str, Component]) -> Config:
    """`config` with exporters that send their authenticators' headers; raises OSError
    when an authenticator cannot produce them (its token file is unreadable)."""

    def bind(exporter: Configured) -> Configured:
        auth = getattr(exporter.config, "auth", None)
        if auth is None:
            return exporter
        authenticator: ClientAuthenticator = extensions[auth.authenticator]
        added = authenticator.client_headers()
        # The authenticator's header replaces one written by hand under any capitalisation.
        headers = {k: v for k, v in exporter.config.headers.items() if k.lower() not in added}
        return dataclasses.replace(exporter, config=exporter.config.model_copy(update={"headers": headers | added}))

    return dataclasses.replace(
        config,
        exporters=[bind(c) for c in config.exporters],
        metric_exporters=[bind(c) for c in config.metric_exporters],
        log_exporters=[bind(c) for c in config.log_exporters],
    )
