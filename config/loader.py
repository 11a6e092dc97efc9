"""The collector's YAML config: loading, `${env:...}` expansion and validation.

The shape is the OpenTelemetry Collector's: `receivers`, `processors`, `exporters`,
`extensions` map component ids (`type[/name]`) to settings, and `service` says which of
them run. Validation collects every problem, each prefixed with its key path, so one run
of `spanscore validate` shows all that needs fixing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from spanscore.config.components import Factories, build_factories
from spanscore.config.envsubst import EnvSource, expand_env
from spanscore.core.auth import ClientAuthenticator, ServerAuthenticator, ServerAuthSettings, auth_references
from spanscore.core.component import ComponentFactory, Kind, component_type
from spanscore.core.durations import Duration, format_duration
from spanscore.core.key_path import KEY_ITSELF, key_path
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import PREFIX, is_result_field
from spanscore.exporters.label_limit import DEFAULT_MAX_LABEL_VALUES

DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
# Unless set, the exporters' share of a stop: a third of shutdown_timeout (10s of the default 30s).
DEFAULT_EXPORT_RESERVE_SHARE = 1 / 3
ASSEMBLER_TYPE = "assembler"
MEMORY_LIMITER_TYPE = "memory_limiter"
FILE_STORAGE_TYPE = "file_storage"
_SECTIONS = {"receivers": "receiver", "processors": "processor", "exporters": "exporter", "extensions": "extension"}
# (pipeline role, config section, what its `auth` must name): receivers check, exporters send;
# an `auth` of ServerAuthSettings (an endpoint spanscore serves) checks, wherever it is.
_AUTH_SIDES = (
    ("receivers", "receivers", ServerAuthenticator),
    ("exporters", "exporters", ClientAuthenticator),
    ("metric_exporters", "exporters", ClientAuthenticator),
    ("log_exporters", "exporters", ClientAuthenticator),
    ("extensions", "extensions", ServerAuthenticator),
)


# A problem's line is cut past this: what a config holds is quoted, and it may be long.
MAX_PROBLEM_LINE_CHARS = 1000


class ConfigError(Exception):
    """The config cannot be used; `problems` lists each one as `key.path: message`, each
    line with its control characters escaped and cut short, whatever the config holds."""

    def __init__(self, problems: list[str]):
        self.problems = [
            "\n".join(excerpt(line, MAX_PROBLEM_LINE_CHARS) for line in problem.split("\n")) for problem in problems
        ]
        super().__init__("invalid config:\n" + "\n".join(f"  {p}" for p in self.problems))


class TracesPipeline(BaseModel):
    model_config = ConfigDict(extra="forbid")
    receivers: list[str] = Field(min_length=1)
    processors: list[str] = Field(default_factory=list)
    exporters: list[str] = Field(min_length=1)
    # A `gen_ai.evaluation.result` span event per score, for backends that read only spans;
    # the logs pipeline carries the same events as log records.
    span_events: bool = True


DEFAULT_METRICS_INTERVAL_S = 15.0


class _OwnSourcePipeline(BaseModel):
    """A pipeline whose source is spanscore itself (scores, events): exporters, no receivers."""

    model_config = ConfigDict(extra="forbid")
    exporters: list[str] = Field(min_length=1)
    carries: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _no_receivers(cls, data: Any) -> Any:
        if isinstance(data, dict) and "receivers" in data:
            raise ValueError(f"the {cls.carries}; it takes no receivers")
        return data


class MetricsPipeline(_OwnSourcePipeline):
    carries: ClassVar[str] = "metrics pipeline carries the score metrics spanscore computes"
    export_interval: Duration = DEFAULT_METRICS_INTERVAL_S  # push exporters; Prometheus is scraped
    # Processors' span attributes (`eval.case.id`) copied onto the score metrics: one
    # series per value, so opt-in.
    span_attributes: list[str] = Field(default_factory=list)
    # Distinct values a label takes per metric; later ones are recorded as `other`.
    max_label_values: int = Field(default=DEFAULT_MAX_LABEL_VALUES, gt=0)

    @field_validator("span_attributes")
    @classmethod
    def _processor_attributes(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if not key.startswith(PREFIX) or is_result_field(key):
                raise ValueError(
                    f"{key!r} is not an attribute a processor writes beside its scores, such as eval.case.id"
                )
        return keys


class LogsPipeline(_OwnSourcePipeline):
    carries: ClassVar[str] = "logs pipeline carries the evaluation events spanscore emits"


class Pipelines(BaseModel):
    model_config = ConfigDict(extra="forbid")
    traces: TracesPipeline
    metrics: MetricsPipeline | None = None
    logs: LogsPipeline | None = None


class LogsTelemetry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: str = Field(default="info", pattern="^(?i)(debug|info|warn|warning|error)$")


class Telemetry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    logs: LogsTelemetry = Field(default_factory=LogsTelemetry)


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


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    extensions: list[str] = Field(default_factory=list)
    pipelines: Pipelines
    telemetry: Telemetry = Field(default_factory=Telemetry)
    shutdown_timeout: Duration = DEFAULT_SHUTDOWN_TIMEOUT_S
    # The end of shutdown_timeout kept for the exporters: scoring stops before it, so what
    # could not be scored still leaves (unscored) however long a judge takes to answer.
    shutdown_export_reserve: Duration | None = None

    @field_validator("shutdown_export_reserve")
    @classmethod
    def _reserve_within_timeout(cls, reserve: float | None, info: ValidationInfo) -> float | None:
        timeout = info.data.get("shutdown_timeout")
        if reserve is not None and timeout is not None and not 0 < reserve < timeout:
            raise ValueError(f"must be more than 0 and less than shutdown_timeout ({format_duration(timeout)})")
        return reserve

    @property
    def export_reserve(self) -> float:
        """Seconds of shutdown_timeout kept for the exporters."""
        if self.shutdown_export_reserve is not None:
            return self.shutdown_export_reserve
        return self.shutdown_timeout * DEFAULT_EXPORT_RESERVE_SHARE


@dataclass(frozen=True)
class ConfiguredComponent:
    """A component as the config defines it: its id, type, validated settings and factory.
    The service builds the running component from it."""

    id: str
    type: str
    config: Any
    factory: ComponentFactory


@dataclass(frozen=True)
class Config:
    """A validated config: only the components the service uses, in pipeline order."""

    service: ServiceConfig
    receivers: list[ConfiguredComponent]
    # The processors listed under service.pipelines.traces fill three roles: the assembler
    # (always present; its settings are the pipeline's), the processors that score, and
    # at most one router, which acts at fan-out; the memory limiter guards the receivers.
    assembler: ConfiguredComponent
    processors: list[ConfiguredComponent]  # those that score, in pipeline order
    exporters: list[ConfiguredComponent]
    extensions: list[ConfiguredComponent]
    router: ConfiguredComponent | None = None
    metric_exporters: list[ConfiguredComponent] = field(default_factory=list)
    log_exporters: list[ConfiguredComponent] = field(default_factory=list)
    memory_limiter: ConfiguredComponent | None = None  # guards the receivers, wherever it is listed
    source: str = "<memory>"
    unused: list[str] = field(default_factory=list)
    processor_ids: tuple[str, ...] = ()  # the pipeline's processors as listed, the assembler first
    env_sources: dict[str, EnvSource] = field(default_factory=dict)  # key path -> the variables it read

    def set_by(self, value: str) -> list[tuple[str, EnvSource]]:
        """The settings whose value, read from the environment, appears in `value` (an error
        message): (key path, source), so the message can say which variable to change."""
        return [(path, src) for path, src in self.env_sources.items() if src.value and src.value in value]

    @property
    def pipeline_settings(self) -> Any:
        """The assembler's settings, which are the whole pipeline's (waits, bounds, scope, workers)."""
        return self.assembler.config

    def summary(self) -> str:
        def ids(components: list[ConfiguredComponent]) -> str:
            return ", ".join(c.id for c in components) or "none"

        summary = (
            f"{self.source}: valid; receivers: {ids(self.receivers)}; processors: {', '.join(self.processor_ids)}; "
            f"exporters: {ids(self.exporters)}; extensions: {ids(self.extensions)}"
        )
        if self.metric_exporters:
            summary += f"; score metrics: {ids(self.metric_exporters)}"
        if self.log_exporters:
            summary += f"; evaluation events: {ids(self.log_exporters)}"
        if self.memory_limiter is not None:
            summary += f"; memory limiter: {self.memory_limiter.id}"
        return summary


def load_config(path: str | Path, environ: dict[str, str] | None = None, factories: Factories | None = None) -> Config:
    """Read, expand and validate a config file; raises ConfigError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    return parse_config(text, source=str(path), environ=environ, factories=factories)


def parse_config(
    text: str,
    source: str = "<memory>",
    environ: dict[str, str] | None = None,
    factories: Factories | None = None,
) -> Config:
    """Validate `text` against `factories` (default: built-ins and installed plugins)."""
    if factories is None:
        factories = build_factories()
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: not valid YAML: {exc}"]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"<root>: expected a mapping of sections, got {type(raw).__name__}"])
    problems: list[str] = []
    env_sources: dict[str, EnvSource] = {}
    unexpanded: set[str] = set()
    raw = expand_env(raw, "", problems, environ, env_sources, unexpanded)
    for key in raw:
        if key not in _SECTIONS and key != "service":
            problems.append(
                f"{excerpt(str(key))}: unknown section; expected one of receivers, processors, exporters, extensions, "
                "service"
            )

    sections: dict[str, dict[str, ConfiguredComponent]] = {}
    for section, kind in _SECTIONS.items():
        sections[section] = _validate_section(section, kind, raw.get(section), factories, problems, unexpanded)
    if ASSEMBLER_TYPE not in _mapping(raw.get("processors")):
        # Every pipeline assembles traces: the assembler needs no section of its own.
        factory = factories.lookup("processor", ASSEMBLER_TYPE)
        sections["processors"][ASSEMBLER_TYPE] = ConfiguredComponent(
            ASSEMBLER_TYPE, ASSEMBLER_TYPE, factory.config_model(), factory
        )

    service = references = None
    if "service" not in raw:
        problems.append("service: missing; it must name the traces pipeline's receivers and exporters")
    else:
        written = raw["service"] if raw["service"] is not None else {}
        service = _validate(ServiceConfig, written, "service", problems, unexpanded)
        references = _validate(ServiceReferences, written, "service", [], unexpanded)  # its problems: ServiceConfig's
    if references is None:
        raise ConfigError(problems)

    pipeline = references.pipelines.traces
    metrics, logs = references.pipelines.metrics, references.pipelines.logs
    chosen: dict[str, list[ConfiguredComponent]] = {}
    listed_processor_types: list[str] = []  # with those whose settings are invalid
    for key, section, ids, where in (
        ("receivers", "receivers", pipeline.receivers, "service.pipelines.traces.receivers"),
        ("processors", "processors", pipeline.processors, "service.pipelines.traces.processors"),
        ("exporters", "exporters", pipeline.exporters, "service.pipelines.traces.exporters"),
        ("metric_exporters", "exporters", metrics.exporters if metrics else [], "service.pipelines.metrics.exporters"),
        ("log_exporters", "exporters", logs.exporters if logs else [], "service.pipelines.logs.exporters"),
        ("extensions", "extensions", references.extensions, "service.extensions"),
    ):
        chosen[key] = []
        seen: set[str] = set()
        for i, component_id in enumerate(ids):
            if component_id in seen:
                problems.append(f"{where}[{i}]: {_quoted(component_id)} is listed twice")
                continue
            seen.add(component_id)
            component = sections[section].get(component_id)
            if component is None and component_id not in _mapping(raw.get(section)):
                problems.append(f"{where}[{i}]: {_quoted(component_id)} is not defined under {section}")
                continue
            # Where a component may be listed depends on its type only: checked when its
            # settings are invalid too. What its settings name needs them valid.
            factory = (
                component.factory if component else factories.lookup(_SECTIONS[section], component_type(component_id))
            )
            if factory is None:  # an unknown type, reported with its section
                continue
            if key == "exporters" and factory.create is None:
                problems.append(
                    f"{where}[{i}]: {_quoted(component_id)} exports metrics only; "
                    "list it under service.pipelines.metrics"
                )
                continue
            if key == "metric_exporters" and factory.create_metric_reader is None:
                problems.append(
                    f"{where}[{i}]: {_quoted(component_id)} cannot export metrics; use prometheus, otlp or otlphttp"
                )
                continue
            if key == "log_exporters" and factory.create_log_exporter is None:
                problems.append(f"{where}[{i}]: {_quoted(component_id)} cannot export logs; use otlp, otlphttp or file")
                continue
            if key == "processors":
                listed_processor_types.append(factory.type)
            if component is not None:
                chosen[key].append(component)

    problems.extend(_authenticator_problems(chosen, sections["extensions"], raw.get("extensions"), references))
    problems.extend(_storage_problems(chosen["exporters"], sections["extensions"], raw.get("extensions"), references))
    problems.extend(_processor_order_problems(listed_processor_types))
    # The memory limiter refuses requests at the receivers, before assembly, so its place
    # in the list does not matter and the processors that score never see it.
    limiters = [c for c in chosen["processors"] if c.type == MEMORY_LIMITER_TYPE]
    processors = [c for c in chosen["processors"] if c.type != MEMORY_LIMITER_TYPE]
    routers = _routers(processors)
    problems.extend(_routing_problems(routers, pipeline.exporters))
    if problems or service is None:
        raise ConfigError(problems)
    if ASSEMBLER_TYPE not in listed_processor_types:
        processors.insert(0, sections["processors"][ASSEMBLER_TYPE])

    used = {c.id for components in chosen.values() for c in components} | {ASSEMBLER_TYPE}
    unused = [f"{section}.{cid}" for section in _SECTIONS for cid in sections[section] if cid not in used]
    return Config(
        service=service,
        receivers=chosen["receivers"],
        assembler=processors[0],
        processors=[c for c in processors[1:] if c not in routers],
        router=routers[0] if routers else None,
        processor_ids=tuple(c.id for c in processors),
        exporters=chosen["exporters"],
        extensions=chosen["extensions"],
        metric_exporters=chosen["metric_exporters"],
        log_exporters=chosen["log_exporters"],
        memory_limiter=limiters[0] if limiters else None,
        source=source,
        unused=unused,
        env_sources=env_sources,
    )


def _validate_section(
    section: str,
    kind: Kind,
    raw: Any,
    factories: Factories,
    problems: list[str],
    unexpanded: set[str],
) -> dict[str, ConfiguredComponent]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{section}: expected a mapping of component ids to settings, got {type(raw).__name__}")
        return {}
    components = {}
    for component_id, settings in raw.items():
        where = f"{section}.{excerpt(str(component_id))}"
        if not isinstance(component_id, str) or not component_id:
            problems.append(f"{where}: component ids are strings like type or type/name")
            continue
        type_name = component_type(component_id)
        factory = factories.lookup(kind, type_name)
        if factory is None:
            known = ", ".join(factories.known(kind)) or "none"
            problems.append(f"{where}: unknown {kind} type {_quoted(type_name)}; known: {known}")
            continue
        if settings is None:
            settings = {}
        if not isinstance(settings, dict):
            problems.append(f"{where}: expected a mapping of settings, got {type(settings).__name__}")
            continue
        # Settings valid but for unknown keys still take part in the checks of references.
        config = _validate(factory.config_model, settings, where, problems, unexpanded)
        if config is not None:
            components[component_id] = ConfiguredComponent(component_id, type_name, config, factory)
    return components


def _authenticator_problems(
    chosen: dict[str, list[ConfiguredComponent]],
    extensions: dict[str, ConfiguredComponent],
    written: Any,
    service: ServiceReferences,
) -> list[str]:
    """Each `auth.authenticator` must name an extension that is defined, started by
    `service.extensions`, and authenticates the side it is used on."""
    problems = []
    seen: set[tuple[str, str]] = set()
    for key, section, side_of_section in _AUTH_SIDES:
        for component in chosen[key]:
            if (section, component.id) in seen:
                continue
            seen.add((section, component.id))
            for where, settings in auth_references(component.config, f"{section}.{component.id}"):
                side = ServerAuthenticator if isinstance(settings, ServerAuthSettings) else side_of_section
                extension_id = settings.authenticator
                extension = extensions.get(extension_id)
                if extension is None:
                    if not (isinstance(written, dict) and extension_id in written):  # else its settings were reported
                        problems.append(f"{where}: {extension_id!r} is not defined under extensions")
                elif extension_id not in service.extensions:
                    problems.append(f"{where}: {extension_id!r} is not listed in service.extensions")
                elif not (isinstance(create := extension.factory.create, type) and issubclass(create, side)):
                    role = "checks requests received" if side is ServerAuthenticator else "authenticates requests sent"
                    problems.append(f"{where}: {extension_id!r} is not an authenticator that {role}")
    return problems


def _storage_problems(
    exporters: list[ConfiguredComponent],
    extensions: dict[str, ConfiguredComponent],
    written: Any,
    service: ServiceReferences,
) -> list[str]:
    """Each `sending_queue.storage` must name a file_storage extension that
    `service.extensions` starts, on an exporter that can keep its queue there."""
    problems = []
    for exporter in exporters:
        queue = getattr(exporter.config, "sending_queue", None)
        storage_id = getattr(queue, "storage", None)
        if storage_id is None:
            continue
        where = f"exporters.{exporter.id}.sending_queue.storage"
        extension = extensions.get(storage_id)
        if not getattr(exporter.factory.create, "stores_requests", False):
            problems.append(
                f"{where}: exporter {exporter.id!r} cannot keep its queue in storage; otlp and otlphttp can"
            )
        elif extension is None:
            if not (isinstance(written, dict) and storage_id in written):  # else its settings were reported
                problems.append(f"{where}: {storage_id!r} is not defined under extensions")
        elif storage_id not in service.extensions:
            problems.append(f"{where}: {storage_id!r} is not listed in service.extensions")
        elif extension.type != FILE_STORAGE_TYPE:
            problems.append(f"{where}: {storage_id!r} is not a file_storage extension")
    return problems


def _processor_order_problems(types: list[str]) -> list[str]:
    """One memory limiter at most, wherever it is; one assembler at most, before the
    processors that read what it assembles. `types` are those of the traces pipeline."""
    problems = []
    if types.count(MEMORY_LIMITER_TYPE) > 1:
        problems.append("service.pipelines.traces.processors: only one memory_limiter may run")
    assemblers = [i for i, t in enumerate(t for t in types if t != MEMORY_LIMITER_TYPE) if t == ASSEMBLER_TYPE]
    if len(assemblers) > 1:
        problems.append("service.pipelines.traces.processors: only one assembler may run")
    elif assemblers and assemblers[0] != 0:
        problems.append(
            "service.pipelines.traces.processors: the assembler must come first; processors read assembled traces"
        )
    return problems


def _routers(processors: list[ConfiguredComponent]) -> list[ConfiguredComponent]:
    """The processors that route traces to exporters (they name exporters) rather than score."""
    return [c for c in processors if hasattr(c.config, "exporter_ids")]


def _routing_problems(routers: list[ConfiguredComponent], exporters: list[str]) -> list[str]:
    """A router may name only exporters of the traces pipeline, and there is one at most."""
    problems = []
    if len(routers) > 1:
        problems.append(
            f"service.pipelines.traces.processors: one router at most, got {', '.join(c.id for c in routers)}"
        )
    for router in routers:
        for exporter in sorted(router.config.exporter_ids() - set(exporters)):
            problems.append(
                f"processors.{router.id}: exporter {exporter!r} is not in service.pipelines.traces.exporters"
            )
    return problems


_M = TypeVar("_M", bound=BaseModel)


def _validate(model: type[_M], data: Any, where: str, problems: list[str], unexpanded: set[str]) -> _M | None:
    """`data` as `model`, or None; its problems are appended, each once, by key path.

    A check of a whole mapping runs only once what is under it is valid, so an unknown
    key would hide it (`politeness: {prompt: ...}` hid that there is no politeness
    metric). An unknown key changes nothing else, so the settings are checked again
    without the unknown keys until none is left: what those checks find is listed in the
    same run, and settings whose only problems were unknown keys are returned for the
    checks of references. A value whose `${env:...}` could not be expanded has that
    problem only, not also the problem of the empty text it became.
    """
    listed = set(problems)
    while True:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
        for path, problem in _described(where, errors):
            if path not in unexpanded and problem not in listed:
                listed.add(problem)
                problems.append(problem)
        data = _without_unknown_keys(data, errors)
        if data is None:
            return None


def _without_unknown_keys(data: Any, errors: list[ErrorDetails]) -> Any:
    """A copy of `data` without the keys `errors` call unknown, or None when it has none."""
    data = copy.deepcopy(data)
    removed = False
    for error in errors:
        if error["type"] != "extra_forbidden":
            continue
        *parents, key = error["loc"]
        node = data
        for part in parents:  # as written; a location a validator reshaped is left alone
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                node = None
        if isinstance(node, dict) and key in node:
            del node[key]
            removed = True
    return data if removed else None


def _described(prefix: str, errors: list[ErrorDetails]) -> list[tuple[str, str]]:
    """Each error as (key path, `key.path: message`)."""
    out = []
    for error in errors:
        path = key_path(prefix, error["loc"])
        message = error["msg"]
        if error["type"] == "value_error":
            message = str(error["ctx"]["error"])  # without pydantic's "Value error, " prefix
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif (
            "input" in error
            and error["type"] != "missing"
            and "\n" not in message  # a listing of problems, which names what it read
            and not isinstance(error["input"], (dict, list))
            and error["loc"][-1:] != (KEY_ITSELF,)  # the path ends with it
            and _quoted(error["input"]) not in message  # already quoted
        ):
            message += f" (got {_quoted(error['input'])})"
        out.append((path, f"{path}: {message}"))
    return out


def _quoted(value: object) -> str:
    """A value from the config in a message: as Python writes it, cut short."""
    return excerpt(repr(value))


def _mapping(section: object) -> dict:
    """A section as written, or nothing when it is not a mapping (already a problem)."""
    return section if isinstance(section, dict) else {}
