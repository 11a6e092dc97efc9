"""How much of the collector one client may hold, and for how long: the OTLP receivers'
server settings, under the names the Collector's confighttp and configgrpc give them.

Every bound has a default, so a client that connects and sends nothing, sends its
headers a byte at a time, or opens a gRPC stream and never sends its message is let go.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from spanscore.core.component import ComponentConfig
from spanscore.core.durations import Duration

DEFAULT_MAX_CONNECTIONS = 1000


class HttpLimits(ComponentConfig):
    # The Collector's confighttp defaults, except read_timeout (no limit there).
    read_header_timeout: Duration = 60.0
    read_timeout: Duration = 60.0
    idle_timeout: Duration = 60.0
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, gt=0)

    @model_validator(mode="after")
    def _positive(self) -> HttpLimits:
        for name in ("read_header_timeout", "read_timeout", "idle_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be greater than 0")
        return self


class KeepaliveServerParameters(ComponentConfig):
    # 0: no limit, as in gRPC.
    max_connection_idle: Duration = 300.0
    max_connection_age: Duration = 0.0
    max_connection_age_grace: Duration = 0.0
    time: Duration = 7200.0
    timeout: Duration = 20.0


class KeepaliveEnforcementPolicy(ComponentConfig):
    min_time: Duration = 300.0
    permit_without_stream: bool = False


class GrpcKeepalive(ComponentConfig):
    server_parameters: KeepaliveServerParameters = Field(default_factory=KeepaliveServerParameters)
    enforcement_policy: KeepaliveEnforcementPolicy = Field(default_factory=KeepaliveEnforcementPolicy)


class GrpcLimits(ComponentConfig):
    max_concurrent_streams: int = Field(default=100, gt=0)
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, gt=0)
    read_timeout: Duration = 60.0
    keepalive: GrpcKeepalive = Field(default_factory=GrpcKeepalive)

    @model_validator(mode="after")
    def _positive(self) -> GrpcLimits:
        if self.read_timeout <= 0:
            raise ValueError("read_timeout must be greater than 0")
        return self

    def channel_options(self) -> list[tuple[str, int]]:
        """gRPC core's server arguments for these settings."""
        server = self.keepalive.server_parameters
        policy = self.keepalive.enforcement_policy
        options = [
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.keepalive_time_ms", _ms(server.time)),
            ("grpc.keepalive_timeout_ms", _ms(server.timeout)),
            ("grpc.http2.min_ping_interval_without_data_ms", _ms(policy.min_time)),
            ("grpc.keepalive_permit_without_calls", int(policy.permit_without_stream)),
        ]
        for name, seconds in (
            ("grpc.max_connection_idle_ms", server.max_connection_idle),
            ("grpc.max_connection_age_ms", server.max_connection_age),
            ("grpc.max_connection_age_grace_ms", server.max_connection_age_grace),
        ):
            if seconds > 0:
                options.append((name, _ms(seconds)))
        return options


def _ms(seconds: float) -> int:
    return max(1, min(round(seconds * 1000), 2**31 - 1))
