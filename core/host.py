"""What a component finds the running extensions through: the host, as the Collector's
`component.Host`.

The service hands the same host to every component's `start`; a receiver looks up the
authenticator its `auth` names, an exporter the authenticator whose headers it sends and
the storage its sending queue is kept in. The config has checked every reference, so a
lookup fails only when a component is started outside a service that runs the extension.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spanscore.core.component import Component


class Host:
    """The running extensions by id; read-only."""

    def __init__(self, extensions: Mapping[str, Component] | None = None):
        self._extensions = dict(extensions or {})

    def extension(self, extension_id: str) -> Component:
        try:
            return self._extensions[extension_id]
        except KeyError:
            raise LookupError(f"extension {extension_id!r} is not running") from None


NO_EXTENSIONS = Host()  # for components started on their own (tests, embedders)
