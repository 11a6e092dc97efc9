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

from spanscore.config.components import SECTION_KINDS, ConfiguredComponent, Factories, build_factories
from spanscore.config.envsubst import EnvSource, expand_env
from spanscore.config.pipelines import (
    ASSEMBLER_TYPE,
    ServiceReferences,
    imply_assembler,
    listed_components,
    quoted,
    stage_problems,
    traces_stages,
)
from spanscore.core.auth import ClientAuthenticator, ServerAuthenticator, ServerAuthSettings, auth_references
from spanscore.core.component import Component, ComponentConfig, component_type
from spanscore.core.durations import Duration, format_duration
from spanscore.core.key_path import KEY_ITSELF, key_path
from spanscore.core.problem_list import ProblemListError
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import PREFIX, is_result_field
from spanscore.core.trace_exporter import TraceExporter
from spanscore.exporters.label_limit import DEFAULT_MAX_LABEL_VALUES
from spanscore.pipeline.memory_limiter import MemoryLimiter, MemoryLimiterConfig
from spanscore.pipeline.score_router import ScoreRouter, ScoreRouterConfig
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.base import Processor

DEFAULT_SHUTDOWN_TIMEOUT_S = 30.0
# Unless set, the exporters' share of a stop: a third of shutdown_timeout (10s of the default 30s).
DEFAULT_EXPORT_RESERVE_SHARE = 1 / 3
FILE_STORAGE_TYPE = "file_storage"
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


class ConfigError(ProblemListError):
    """The config cannot be used; `problems` lists each one as `key.path: message`, each
    line with its control characters escaped and cut short, whatever the config holds."""

    what = "config"

    def __init__(self, problems: list[str]):
        super().__init__(
            ["\n".join(excerpt(line, MAX_PROBLEM_LINE_CHARS) for line in problem.split("\n")) for problem in problems]
        )


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
class Config:
    """A validated config: only the components the service uses, in pipeline order."""

    service: ServiceConfig
    receivers: list[ConfiguredComponent[ComponentConfig, Component]]
    # The traces pipeline's processors list, split (config.pipelines): the assembler stage
    # (always present; its settings are the pipeline's), the processors that score, the
    # score router stage, which acts at fan-out, and the memory limiter stage, which
    # guards the receivers.
    assembler: ConfiguredComponent[PipelineSettings, None]
    processors: list[ConfiguredComponent[ComponentConfig, Processor]]  # those that score, in pipeline order
    exporters: list[ConfiguredComponent[ComponentConfig, TraceExporter]]
    extensions: list[ConfiguredComponent[ComponentConfig, Component]]
    router: ConfiguredComponent[ScoreRouterConfig, ScoreRouter] | None = None
    # Their factories' create_metric_reader and create_log_exporter build what these pipelines use.
    metric_exporters: list[ConfiguredComponent[ComponentConfig, object]] = field(default_factory=list)
    log_exporters: list[ConfiguredComponent[ComponentConfig, object]] = field(default_factory=list)
    memory_limiter: ConfiguredComponent[MemoryLimiterConfig, MemoryLimiter] | None = None
    source: str = "<memory>"
    unused: list[str] = field(default_factory=list)
    processor_ids: tuple[str, ...] = ()  # the pipeline's processors as listed, the assembler first
    env_sources: dict[str, EnvSource] = field(default_factory=dict)  # key path -> the variables it read

    def set_by(self, value: str) -> list[tuple[str, EnvSource]]:
        """The settings whose value, read from the environment, appears in `value` (an error
        message): (key path, source), so the message can say which variable to change."""
        return [(path, src) for path, src in self.env_sources.items() if src.value and src.value in value]

    @property
    def pipeline_settings(self) -> PipelineSettings:
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
    raw = _read_yaml(text, source)
    problems: list[str] = []
    env_sources: dict[str, EnvSource] = {}
    unexpanded: set[str] = set()
    raw = expand_env(raw, "", problems, environ, env_sources, unexpanded)
    problems.extend(_unknown_sections(raw))
    sections = {
        section: _validate_section(section, raw.get(section), factories, problems, unexpanded)
        for section in SECTION_KINDS
    }
    imply_assembler(sections["processors"], raw.get("processors"), factories)
    service, references = _validate_service(raw, problems, unexpanded)
    if references is None:
        raise ConfigError(problems)
    listed = listed_components(references, sections, raw, factories, problems)
    chosen = listed.components
    problems.extend(_authenticator_problems(chosen, sections["extensions"], raw.get("extensions"), references))
    problems.extend(_storage_problems(chosen["exporters"], sections["extensions"], raw.get("extensions"), references))
    problems.extend(stage_problems(listed, references.pipelines.traces.exporters))
    if problems or service is None:
        raise ConfigError(problems)
    stages = traces_stages(listed, sections["processors"])
    used = {c.id for components in chosen.values() for c in components} | {ASSEMBLER_TYPE}
    return Config(
        service=service,
        receivers=chosen["receivers"],
        assembler=stages.assembler,
        processors=stages.processors,
        router=stages.router,
        processor_ids=stages.processor_ids,
        exporters=chosen["exporters"],
        extensions=chosen["extensions"],
        metric_exporters=chosen["metric_exporters"],
        log_exporters=chosen["log_exporters"],
        memory_limiter=stages.memory_limiter,
        source=source,
        unused=[f"{section}.{cid}" for section in SECTION_KINDS for cid in sections[section] if cid not in used],
        env_sources=env_sources,
    )


def _read_yaml(text: str, source: str) -> dict:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{source}: not valid YAML: {exc}"]) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError([f"<root>: expected a mapping of sections, got {type(raw).__name__}"])
    return raw


def _unknown_sections(raw: dict) -> list[str]:
    return [
        f"{excerpt(str(key))}: unknown section; expected one of receivers, processors, exporters, extensions, service"
        for key in raw
        if key not in SECTION_KINDS and key != "service"
    ]


def _validate_service(
    raw: dict, problems: list[str], unexpanded: set[str]
) -> tuple[ServiceConfig | None, ServiceReferences | None]:
    """`service`'s settings, and apart from them the component ids it lists."""
    if "service" not in raw:
        problems.append("service: missing; it must name the traces pipeline's receivers and exporters")
        return None, None
    written = raw["service"] if raw["service"] is not None else {}
    service = _validate(ServiceConfig, written, "service", problems, unexpanded)
    references = _validate(ServiceReferences, written, "service", [], unexpanded)  # its problems: ServiceConfig's
    return service, references


def _validate_section(
    section: str,
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
        factory = factories.in_section(section, type_name)
        if factory is None:
            known = ", ".join(factories.known_in(section)) or "none"
            problems.append(f"{where}: unknown {SECTION_KINDS[section][0]} type {quoted(type_name)}; known: {known}")
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
        if error["type"] == "value_error" and "ctx" in error:
            message = str(error["ctx"]["error"])  # without pydantic's "Value error, " prefix
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif (
            "input" in error
            and error["type"] != "missing"
            and "\n" not in message  # a listing of problems, which names what it read
            and not isinstance(error["input"], (dict, list))
            and error["loc"][-1:] != (KEY_ITSELF,)  # the path ends with it
            and quoted(error["input"]) not in message  # already quoted
        ):
            message += f" (got {quoted(error['input'])})"
        out.append((path, f"{path}: {message}"))
    return out
