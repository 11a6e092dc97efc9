"""Client TLS settings in the Collector's shape (`tls: {insecure, ca_file, ...}`)."""

from __future__ import annotations

import ssl
from pathlib import Path

from pydantic import model_validator

from spanscore.core.component import ComponentConfig


class TlsClientConfig(ComponentConfig):
    insecure: bool = False  # plaintext (gRPC); for HTTP the URL scheme decides
    insecure_skip_verify: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name_override: str | None = None

    @model_validator(mode="after")
    def _files_exist_and_pair(self) -> TlsClientConfig:
        problems = []  # every one, not the first
        if bool(self.cert_file) != bool(self.key_file):
            problems.append("cert_file and key_file go together")
        problems += [
            f"{name} {path!r} does not exist"
            for name in ("ca_file", "cert_file", "key_file")
            if (path := getattr(self, name)) and not Path(path).is_file()
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def read(self, name: str) -> bytes | None:
        path = getattr(self, name)
        return Path(path).read_bytes() if path else None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context
