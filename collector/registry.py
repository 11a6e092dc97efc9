"""Which component types exist, their config models, and how to build them.

Components are named `type[/name]` in config, as in the OpenTelemetry Collector. Each
type registers a pydantic config model (extra keys forbidden, defaults filled in) and a
factory called with the component id and its validated config. Built-in types register
when their modules import; a metric package registers its processor types the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["receiver", "processor", "exporter", "extension"]


class ComponentConfig(BaseModel):
    """Base for every component's config: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class ComponentType:
    kind: Kind
    name: str
    config_model: type[ComponentConfig]
    factory: Callable[[str, Any], Any] | None  # None: the type has no traces role
    # Exporters that can also carry the score metrics: (id, config) -> MetricReader.
    metrics_factory: Callable[[str, Any], Any] | None = None


_TYPES: dict[tuple[Kind, str], ComponentType] = {}


def register(
    kind: Kind,
    name: str,
    config_model: type[ComponentConfig],
    factory: Callable[[str, Any], Any] | None,
    metrics_factory: Callable[[str, Any], Any] | None = None,
) -> None:
    """Make `name` usable as a component type of `kind`; re-registering replaces it."""
    _TYPES[(kind, name)] = ComponentType(kind, name, config_model, factory, metrics_factory)


def lookup(kind: Kind, name: str) -> ComponentType | None:
    _load_builtins()
    return _TYPES.get((kind, name))


def known(kind: Kind) -> list[str]:
    _load_builtins()
    return sorted(name for k, name in _TYPES if k == kind)


def component_type(component_id: str) -> str:
    """`otlp/backend` -> `otlp`."""
    return component_id.split("/", 1)[0]


_loaded = False


def _load_builtins() -> None:
    # Imported on first use so that importing the registry alone stays cheap and acyclic.
    global _loaded
    if _loaded:
        return
    _loaded = True
    import collector.assembler  # noqa: F401
    import collector.health_check  # noqa: F401
    import collector.receivers  # noqa: F401
    import exporters  # noqa: F401
    import processors.embedding_processor  # noqa: F401
    import processors.judge_processor  # noqa: F401
    import processors.session_processor  # noqa: F401
