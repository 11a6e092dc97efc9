"""The table of component types a service can build: built-ins, then installed plugins.

As the Collector's distribution lists its `Factories`, the built-in types are named here
explicitly; third-party types come from the entry points of the `spanscore.components`
group, each pointing at a `ComponentFactory`:

    [project.entry-points."spanscore.components"]
    answer_length = "my_package.answer_length:FACTORY"

A plugin may not replace a built-in type or another plugin's: the first one wins and the
clash is reported, so a config never silently means something else after an install.
Nor may it add a pipeline stage: the stages (assembler, memory_limiter, score_router) are
the pipeline's own, written among the processors in the YAML, so a processor may not take
a stage's type name either.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from spanscore.core.component import ComponentConfig, ComponentFactory, Kind
from spanscore.exporters import debug, file, otlp_grpc, otlp_http, phoenix, prometheus
from spanscore.extensions import bearer_token_auth, file_storage, health_check
from spanscore.pipeline import assembler, memory_limiter, score_router
from spanscore.processors import checks, embedding_metrics, failure_localization, rag_metrics, session_metrics
from spanscore.processors.ground_truth import processor as ground_truth
from spanscore.processors.judge_metrics import processor as judge_metrics
from spanscore.receivers import otlp

log = logging.getLogger("spanscore.components")

ENTRY_POINT_GROUP = "spanscore.components"
BUILT_IN = "built-in"
# The kinds each config section defines, the first naming them in messages: the pipeline's
# stages are written among the processors, as in the Collector's YAML.
SECTION_KINDS: dict[str, tuple[Kind, ...]] = {
    "receivers": ("receiver",),
    "processors": ("processor", "stage"),
    "exporters": ("exporter",),
    "extensions": ("extension",),
}

BUILTIN_FACTORIES: tuple[ComponentFactory, ...] = (
    otlp.FACTORY,
    assembler.FACTORY,
    memory_limiter.FACTORY,
    embedding_metrics.FACTORY,
    rag_metrics.FACTORY,
    judge_metrics.FACTORY,
    failure_localization.FACTORY,
    session_metrics.FACTORY,
    ground_truth.FACTORY,
    checks.FACTORY,
    score_router.FACTORY,
    otlp_grpc.FACTORY,
    otlp_http.FACTORY,
    file.FACTORY,
    debug.FACTORY,
    prometheus.FACTORY,
    phoenix.FACTORY,
    health_check.FACTORY,
    file_storage.FACTORY,
    bearer_token_auth.FACTORY,
)


_Settings = TypeVar("_Settings", bound=ComponentConfig)
_Built = TypeVar("_Built", covariant=True)


@dataclass(frozen=True)
class ConfiguredComponent(Generic[_Settings, _Built]):
    """A component as the config defines it: its id, type, validated settings and factory.
    The service builds the running component from it."""

    id: str
    type: str
    config: _Settings
    factory: ComponentFactory[_Settings, _Built]


@dataclass
class Factories:
    """Component types by kind and type name, plus what went wrong loading plugins."""

    by_kind: dict[Kind, dict[str, ComponentFactory]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, factory: ComponentFactory, origin: str) -> None:
        if factory.kind == "stage" and origin != BUILT_IN:
            self.problems.append(f"{origin}: the pipeline's stages are spanscore's own; {factory.type!r} ignored")
            return
        section = next(section for section, kinds in SECTION_KINDS.items() if factory.kind in kinds)
        if self.in_section(section, factory.type) is not None:
            self.problems.append(f"{origin}: {factory.kind} type {factory.type!r} is already defined; ignored")
            return
        self.by_kind.setdefault(factory.kind, {})[factory.type] = factory

    def lookup(self, kind: Kind, type_name: str) -> ComponentFactory | None:
        return self.by_kind.get(kind, {}).get(type_name)

    def known(self, kind: Kind) -> list[str]:
        return sorted(self.by_kind.get(kind, {}))

    def in_section(self, section: str, type_name: str) -> ComponentFactory | None:
        """The type `type_name` names under `section` (`processors` holds processors and stages)."""
        return next(
            (f for kind in SECTION_KINDS[section] if (f := self.lookup(kind, type_name)) is not None),
            None,
        )

    def known_in(self, section: str) -> list[str]:
        return sorted(t for kind in SECTION_KINDS[section] for t in self.by_kind.get(kind, {}))

    def __iter__(self) -> Iterator[ComponentFactory]:
        for types in self.by_kind.values():
            yield from types.values()


def build_factories(extra: Iterable[ComponentFactory] = (), plugins: bool = True) -> Factories:
    """Built-ins, then `extra` (for embedding spanscore), then installed plugins."""
    factories = Factories()
    for factory in BUILTIN_FACTORIES:
        factories.add(factory, BUILT_IN)
    for factory in extra:
        factories.add(factory, "extra")
    if plugins:
        for entry_point in entry_points(group=ENTRY_POINT_GROUP):
            _add_plugin(factories, entry_point)
    for problem in factories.problems:
        log.warning("%s", problem)
    return factories


def _add_plugin(factories: Factories, entry_point: EntryPoint) -> None:
    origin = f"plugin {entry_point.name} ({entry_point.value})"
    try:
        factory = entry_point.load()
    except Exception as exc:  # a broken plugin must not stop the built-ins from working
        factories.problems.append(f"{origin}: cannot be loaded: {type(exc).__name__}: {exc}")
        return
    if not isinstance(factory, ComponentFactory):
        factories.problems.append(f"{origin}: is a {type(factory).__name__}, not a ComponentFactory; ignored")
        return
    factories.add(factory, origin)
