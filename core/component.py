"""What every component is: a config model, a factory, and one lifecycle.

Components are named `type[/name]` in config, as in the OpenTelemetry Collector. Each
component type is described by a `ComponentFactory`: its kind, its type name, a pydantic
config model (extra keys forbidden, defaults filled in) and how to build an instance. The
service builds its table of factories from an explicit list of built-ins plus the entry
points of the `spanscore.components` group (see `spanscore.config.components`);
nothing registers itself as an import side effect.

Every component, whatever its kind, has the same lifecycle: `start(host)` once, then
`shutdown(deadline)`, where `deadline` is a `time.monotonic()` value. `shutdown` must be
safe without `start` (a sibling failed to start) and safe to call twice. The `Host` is
the one way a component reaches the running extensions, as the Collector's
`component.Host`: a receiver finds the authenticator its `auth` names, an exporter the
authenticator whose headers it sends and the storage its sending queue is kept in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter
    from opentelemetry.sdk.metrics.export import MetricReader

    from spanscore.core.consumer import TracesConsumer

# A stage is one of the pipeline's own parts (the assembler, the memory limiter, the score
# router): written among the processors, as in the Collector's YAML, but built by the
# service around them; only spanscore defines stages.
Kind = Literal["receiver", "processor", "stage", "exporter", "extension"]
Role = TypeVar("Role")  # what a component asks of an extension (an authenticator, a storage)


class ComponentConfig(BaseModel):
    """Base for every component's config: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def not_run(self, component_id: str) -> str | None:
        """What a component so configured leaves unscored, and what to set; None when nothing."""
        return None


class Host:
    """The running extensions by id, handed to every component's `start`; read-only.

    The config checked every reference, so a lookup fails only for a component started
    outside a service that runs the extension.
    """

    def __init__(self, extensions: Mapping[str, Component] | None = None):
        self._extensions = dict(extensions or {})

    def extension(self, extension_id: str, role: type[Role]) -> Role:
        """The running extension `extension_id`, which the caller uses as a `role`."""
        try:
            extension = self._extensions[extension_id]
        except KeyError:
            raise LookupError(f"extension {extension_id!r} is not running") from None
        if not isinstance(extension, role):
            raise LookupError(f"extension {extension_id!r} is not a {role.__name__}")
        return extension


NO_EXTENSIONS = Host()  # for a component started on its own (tests, embedding spanscore)


@runtime_checkable
class Component(Protocol):
    """The lifecycle the service drives every component through.

    Threading: both hooks run on the collector's event loop.
    """

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        """Acquire resources (sockets, clients, models); raise to abort the service's start."""

    async def shutdown(self, deadline: float) -> None:
        """Release everything by `deadline` (monotonic seconds); safe without start and twice."""


@runtime_checkable
class PipelineWatcher(Protocol):
    """An extension told when the pipeline starts and stops taking data (health checks)."""

    def pipeline_ready(self) -> None: ...

    def pipeline_not_ready(self) -> None: ...


Settings = TypeVar("Settings", bound=ComponentConfig)  # a component type's config model
Built = TypeVar("Built", covariant=True)  # what its `create` builds
# (id, config, export interval in seconds, host) -> a reader for the score metrics.
MetricReaderCreate = Callable[[str, Any, float, Host], "MetricReader"]
# (id, config, host) -> an exporter of the evaluation events as log records.
LogExporterCreate = Callable[[str, Any, Host], "LogRecordExporter"]


@dataclass(frozen=True)
class ComponentFactory(Generic[Settings, Built]):
    """One component type: what the config may say about it and how to build it.

    `create` is None for a type with no traces role (an exporter of metrics only, or
    the assembler stage, which the service builds itself). `create_metric_reader` is set for
    exporters that can also carry the score metrics (`service.pipelines.metrics`),
    `create_log_exporter` for those that can carry the evaluation events
    (`service.pipelines.logs`).
    """

    kind: Kind
    type: str
    config_model: type[Settings]
    # Called with (id, config); a receiver's and the memory limiter's also with the next consumer.
    create: Callable[..., Built] | None
    create_metric_reader: MetricReaderCreate | None = None
    create_log_exporter: LogExporterCreate | None = None

    def build(self, component_id: str, config: Settings, *consumer: TracesConsumer) -> Built:
        """A new instance for the traces pipeline; the config lists no type without a traces role there."""
        if self.create is None:
            raise TypeError(f"{self.kind} type {self.type!r} has no traces role: it is not built from the config")
        return self.create(component_id, config, *consumer)


def component_type(component_id: str) -> str:
    """`otlp/backend` -> `otlp`."""
    return component_id.split("/", 1)[0]
