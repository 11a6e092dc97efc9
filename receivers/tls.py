"""Server TLS settings in the Collector's shape (`tls: {cert_file, key_file, client_ca_file}`).

With `client_ca_file` the receiver asks for a client certificate and refuses, at the
handshake, a client without one signed by that CA (mutual TLS).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc
from pydantic import model_validator

from spanscore.core.component import ComponentConfig


class TlsServerConfig(ComponentConfig):
    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    @model_validator(mode="after")
    def _files_exist(self) -> TlsServerConfig:
        missing = [
            f"{name} {path!r} does not exist"
            for name in ("cert_file", "key_file", "client_ca_file")
            if (path := getattr(self, name)) and not Path(path).is_file()
        ]
        if missing:  # every one, not the first
            raise ValueError("; ".join(missing))
        return self

    def ssl_context(self) -> ssl.SSLContext:
        """For aiohttp; raises OSError naming the files when they cannot be loaded."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:
                context.load_verify_locations(self.client_ca_file)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ValueError) as exc:
            raise OSError(f"cannot load the TLS files {self._files()}: {exc}") from None
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        # gRPC reports files it cannot use as "Failed to bind to address"; the check HTTP
        # makes names them.
        self.ssl_context()
        client_ca = Path(self.client_ca_file).read_bytes() if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())],
            root_certificates=client_ca,
            require_client_auth=client_ca is not None,
        )

    def _files(self) -> str:
        return ", ".join(p for p in (self.cert_file, self.key_file, self.client_ca_file) if p)


def security(tls: TlsServerConfig | None) -> str:
    """How a receiver listens, for its startup log line."""
    if tls is None:
        return "plaintext"
    return "mTLS, client certificates required" if tls.client_ca_file else "TLS"
