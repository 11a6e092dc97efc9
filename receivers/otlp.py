"""The `otlp` receiver: OTLP over gRPC and HTTP, as an agent's exporter sends it."""

from __future__ import annotations

import asyncio
import time

from pydantic import Field, field_validator, model_validator

from spanscore.core.auth import AuthSettings, server_authenticator
from spanscore.core.component import NO_EXTENSIONS, ComponentConfig, ComponentFactory, Host
from spanscore.core.consumer import TracesConsumer, WithoutWriteAhead
from spanscore.core.endpoints import split_host_port, validate_endpoint
from spanscore.receivers.grpc_receiver import GrpcReceiver
from spanscore.receivers.http_receiver import HttpReceiver
from spanscore.receivers.limits import GrpcLimits, HttpLimits
from spanscore.receivers.tls import TlsServerConfig

DEFAULT_GRPC_ENDPOINT = "127.0.0.1:4317"
DEFAULT_HTTP_ENDPOINT = "127.0.0.1:4318"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
# Requests in flight when shutdown begins get this long to finish, within the deadline.
SHUTDOWN_GRACE_S = 1.0


class GrpcProtocolConfig(GrpcLimits):
    endpoint: str = DEFAULT_GRPC_ENDPOINT
    max_recv_msg_size_mib: float = Field(default=DEFAULT_MAX_BODY_BYTES / 2**20, gt=0, le=2047)
    tls: TlsServerConfig | None = None
    auth: AuthSettings | None = None

    _endpoint = field_validator("endpoint")(validate_endpoint)


class HttpProtocolConfig(HttpLimits):
    endpoint: str = DEFAULT_HTTP_ENDPOINT
    traces_url_path: str = Field(default="/v1/traces", pattern=r"^/")
    max_request_body_size: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0)
    tls: TlsServerConfig | None = None
    auth: AuthSettings | None = None

    _endpoint = field_validator("endpoint")(validate_endpoint)


class Protocols(ComponentConfig):
    grpc: GrpcProtocolConfig | None = None
    http: HttpProtocolConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _empty_means_defaults(cls, data):
        # `grpc:` with nothing under it enables the protocol with defaults, as in the Collector.
        if isinstance(data, dict):
            return {key: ({} if value is None else value) for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _at_least_one(self) -> Protocols:
        if self.grpc is None and self.http is None:
            raise ValueError("enable at least one of grpc and http")
        return self


class OtlpReceiverConfig(ComponentConfig):
    protocols: Protocols = Field(
        default_factory=lambda: Protocols(grpc=GrpcProtocolConfig(), http=HttpProtocolConfig())
    )
    # With file_storage on: false keeps this receiver's traffic out of the write-ahead log.
    write_ahead: bool = True


class OtlpReceiver:
    """Starts the configured protocol servers feeding one consumer; a protocol whose
    `auth` names an authenticator finds it through the host."""

    def __init__(self, component_id: str, config: OtlpReceiverConfig, consumer: TracesConsumer):
        self.id = component_id
        self.config = config
        self.consumer = consumer if config.write_ahead else WithoutWriteAhead(consumer)
        self.grpc: GrpcReceiver | None = None
        self.http: HttpReceiver | None = None

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        protocols = self.config.protocols
        if protocols.grpc is not None:
            self.grpc = GrpcReceiver(
                protocols.grpc.endpoint,
                int(protocols.grpc.max_recv_msg_size_mib * 2**20),
                self.consumer,
                protocols.grpc.tls,
                server_authenticator(protocols.grpc.auth, host),
                protocols.grpc,
            )
            await self.grpc.start()
        if protocols.http is not None:
            address, port = split_host_port(protocols.http.endpoint)
            self.http = HttpReceiver(
                address,
                port,
                protocols.http.traces_url_path,
                protocols.http.max_request_body_size,
                self.consumer,
                protocols.http.tls,
                server_authenticator(protocols.http.auth, host),
                protocols.http,
            )
            try:
                await self.http.start()
            except OSError:
                await self.shutdown(time.monotonic())
                raise

    async def shutdown(self, deadline: float) -> None:
        """Stop accepting; requests in flight get up to SHUTDOWN_GRACE_S to finish, within
        `deadline`, then they are cut off (a client that never finishes its body included)."""
        grace_s = max(0.0, min(SHUTDOWN_GRACE_S, deadline - time.monotonic()))
        stops = [server.stop(grace_s) for server in (self.http, self.grpc) if server is not None]
        await asyncio.gather(*stops)


FACTORY = ComponentFactory("receiver", "otlp", OtlpReceiverConfig, OtlpReceiver)
