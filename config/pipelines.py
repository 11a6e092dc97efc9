"""What `service` lists, resolved into components, and the traces pipeline's stages.

Each id a pipeline (or `service.extensions`) lists must be defined under its section,
listed once, and of a type that can go there: an exporter of metrics only goes in the
metrics pipeline, one that cannot carry logs not in the logs pipeline.

The traces pipeline's `processors` list holds, as in the Collector's YAML, the processors
that score and the pipeline's own stages, which the service builds around them:

- `assembler`: first, the one every pipeline has; implied when not listed (its settings
  then come from `processors.assembler` if written, else the defaults), and its settings
  are the whole pipeline's;
- `memory_limiter`: at most one, anywhere in the list; it refuses requests at the
  receivers, before assembly, so its place does not matter;
- `score_router`: at most one, acting at fan-out; it may name only the traces
  pipeline's exporters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from spanscore.config.components import ConfiguredComponent, Factories
from spanscore.core.component import ComponentFactory, component_type
from spanscore.core.quoting import excerpt
from spanscore.pipeline import assembler, memory_limiter, score_router
from spanscore.pipeline.memory_limiter import MemoryLimiter, MemoryLimiterConfig
from spanscore.pipeline.score_router import ScoreRouter, ScoreRouterConfig
from spanscore.pipeline.settings import PipelineSettings

ASSEMBLER_TYPE = assembler.FACTORY.type
MEMORY_LIMITER_TYPE = memory_limiter.FACTORY.type
SCORE_ROUTER_TYPE = score_router.FACTORY.type
TRACES_PROCESSORS = "service.pipelines.traces.processors"


class _Listed(BaseModel):
    """The component ids a pipeline lists, whatever its other settings."""

    model_config = ConfigDict(extra="ignore")
    receivers: list[str] = Field(default_factory=list)
    processors: list[str] = Field(default_factory=list)
    exporters: list[str] = Field(default_factory=list)


class _ListedPipelines(BaseModel):
    model_config = ConfigDict(extra="ignore")
    traces: _Listed
    metrics: _Listed | None = None
    logs: _Listed | None = None


class ServiceReferences(BaseModel):
    """The component ids `service` lists, read apart from its settings (which
    ServiceConfig checks), so the references are checked when a setting is invalid."""

    model_config = ConfigDict(extra="ignore")
    extensions: list[str] = Field(default_factory=list)
    pipelines: _ListedPipelines


@dataclass(frozen=True)
class ListedComponents:
    """The components `service` lists, by role (receivers, processors, exporters,
    metric_exporters, log_exporters, extensions), in order; only those whose settings
    are valid. `processor_types` are the traces pipeline's, invalid settings included:
    where a component may go depends on its type only."""

    components: dict[str, list[ConfiguredComponent]]
    processor_types: list[str]


@dataclass(frozen=True)
class TracesStages:
    """The traces pipeline's processors list, split into the stages and those that score."""

    assembler: ConfiguredComponent[PipelineSettings, None]  # the service builds it itself
    processors: list[ConfiguredComponent]  # those that score, in pipeline order
    router: ConfiguredComponent[ScoreRouterConfig, ScoreRouter] | None
    memory_limiter: ConfiguredComponent[MemoryLimiterConfig, MemoryLimiter] | None
    processor_ids: tuple[str, ...]  # as listed, the assembler first, the memory limiter left out


def imply_assembler(processors: dict[str, ConfiguredComponent], written: Any, factories: Factories) -> None:
    """Every pipeline assembles traces: the assembler needs no section of its own."""
    if ASSEMBLER_TYPE not in _mapping(written):
        factory = factories.lookup("stage", ASSEMBLER_TYPE)
        assert factory is not None, "the assembler is a built-in stage"
        processors[ASSEMBLER_TYPE] = ConfiguredComponent(
            ASSEMBLER_TYPE, ASSEMBLER_TYPE, factory.config_model(), factory
        )


def listed_components(
    references: ServiceReferences,
    sections: dict[str, dict[str, ConfiguredComponent]],
    written: dict,
    factories: Factories,
    problems: list[str],
) -> ListedComponents:
    """Each id `service` lists, resolved in `sections` (the valid components by section)."""
    traces, metrics, logs = references.pipelines.traces, references.pipelines.metrics, references.pipelines.logs
    chosen: dict[str, list[ConfiguredComponent]] = {}
    processor_types: list[str] = []
    for key, section, ids, where in (
        ("receivers", "receivers", traces.receivers, "service.pipelines.traces.receivers"),
        ("processors", "processors", traces.processors, TRACES_PROCESSORS),
        ("exporters", "exporters", traces.exporters, "service.pipelines.traces.exporters"),
        ("metric_exporters", "exporters", metrics.exporters if metrics else [], "service.pipelines.metrics.exporters"),
        ("log_exporters", "exporters", logs.exporters if logs else [], "service.pipelines.logs.exporters"),
        ("extensions", "extensions", references.extensions, "service.extensions"),
    ):
        chosen[key] = []
        seen: set[str] = set()
        for i, component_id in enumerate(ids):
            if component_id in seen:
                problems.append(f"{where}[{i}]: {quoted(component_id)} is listed twice")
                continue
            seen.add(component_id)
            component = sections[section].get(component_id)
            if component is None and component_id not in _mapping(written.get(section)):
                problems.append(f"{where}[{i}]: {quoted(component_id)} is not defined under {section}")
                continue
            # Where a component may be listed depends on its type only: checked when its
            # settings are invalid too. What its settings name needs them valid.
            factory = component.factory if component else factories.in_section(section, component_type(component_id))
            if factory is None:  # an unknown type, reported with its section
                continue
            problem = _misplaced(key, factory)
            if problem:
                problems.append(f"{where}[{i}]: {quoted(component_id)} {problem}")
                continue
            if key == "processors":
                processor_types.append(factory.type)
            if component is not None:
                chosen[key].append(component)
    return ListedComponents(chosen, processor_types)


def _misplaced(role: str, factory: ComponentFactory) -> str | None:
    """Why a component of this type cannot fill `role`, or None."""
    if role == "exporters" and factory.create is None:
        return "exports metrics only; list it under service.pipelines.metrics"
    if role == "metric_exporters" and factory.create_metric_reader is None:
        return "cannot export metrics; use prometheus, otlp or otlphttp"
    if role == "log_exporters" and factory.create_log_exporter is None:
        return "cannot export logs; use otlp, otlphttp or file"
    return None


def stage_problems(listed: ListedComponents, exporters: list[str]) -> list[str]:
    """Where the traces pipeline's stages are listed, and what the router names."""
    routers = [c for c in listed.components["processors"] if c.type == SCORE_ROUTER_TYPE]
    return _order_problems(listed.processor_types) + _routing_problems(routers, exporters)


def traces_stages(listed: ListedComponents, processors: dict[str, ConfiguredComponent]) -> TracesStages:
    """The traces pipeline's stages and the processors that score, of a config whose
    stage_problems are none; `processors` are the valid components under `processors`,
    the implied assembler included."""
    in_order = [c for c in listed.components["processors"] if c.type != MEMORY_LIMITER_TYPE]
    if ASSEMBLER_TYPE not in listed.processor_types:
        in_order.insert(0, processors[ASSEMBLER_TYPE])
    limiters = [c for c in listed.components["processors"] if c.type == MEMORY_LIMITER_TYPE]
    routers = [c for c in in_order if c.type == SCORE_ROUTER_TYPE]
    return TracesStages(
        assembler=cast(ConfiguredComponent[PipelineSettings, None], in_order[0]),
        processors=[c for c in in_order[1:] if c.factory.kind == "processor"],
        router=cast(ConfiguredComponent[ScoreRouterConfig, ScoreRouter], routers[0]) if routers else None,
        memory_limiter=cast(ConfiguredComponent[MemoryLimiterConfig, MemoryLimiter], limiters[0]) if limiters else None,
        processor_ids=tuple(c.id for c in in_order),
    )


def _order_problems(types: list[str]) -> list[str]:
    """One memory limiter at most, wherever it is; one assembler at most, before the
    processors that read what it assembles."""
    problems = []
    if types.count(MEMORY_LIMITER_TYPE) > 1:
        problems.append(f"{TRACES_PROCESSORS}: only one memory_limiter may run")
    assemblers = [i for i, t in enumerate(t for t in types if t != MEMORY_LIMITER_TYPE) if t == ASSEMBLER_TYPE]
    if len(assemblers) > 1:
        problems.append(f"{TRACES_PROCESSORS}: only one assembler may run")
    elif assemblers and assemblers[0] != 0:
        problems.append(f"{TRACES_PROCESSORS}: the assembler must come first; processors read assembled traces")
    return problems


def _routing_problems(routers: list[ConfiguredComponent], exporters: list[str]) -> list[str]:
    """A router may name only exporters of the traces pipeline, and there is one at most."""
    problems = []
    if len(routers) > 1:
        problems.append(f"{TRACES_PROCESSORS}: one router at most, got {', '.join(c.id for c in routers)}")
    for router in routers:
        for exporter in sorted(router.config.exporter_ids() - set(exporters)):
            problems.append(
                f"processors.{router.id}: exporter {exporter!r} is not in service.pipelines.traces.exporters"
            )
    return problems


def quoted(value: object) -> str:
    """A value from the config in a message: as Python writes it, cut short."""
    return excerpt(repr(value))


def _mapping(section: object) -> dict:
    """A section as written, or nothing when it is not a mapping (already a problem)."""
    return section if isinstance(section, dict) else {}
