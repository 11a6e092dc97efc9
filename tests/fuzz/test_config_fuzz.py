"""The config loader, fuzzed: any YAML either loads or is a ConfigError that says why.

`parse_config` promises a `ConfigError` listing each problem as `key.path: message`, so
`spanscore validate` and `spanscore run` print it instead of a traceback. Documents
come from three places: random sections of components with the settings their config
models really have (and values of every YAML type, `${env:...}` references, durations),
structural mutations of the default otel-config.yaml, and character-level mutations of
its text.
"""

from __future__ import annotations

import typing
from functools import cache
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from spanscore.config.loader import Config, ConfigError, parse_config
from tests.support.factories import TEST_FACTORIES
from tests.support.fuzz_strategies import mutated, text_mutated

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "otel-config.yaml"
SECTIONS = {"receivers": "receiver", "processors": "processor", "exporters": "exporter", "extensions": "extension"}


def _models(annotation, seen: set) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation] if annotation not in seen else []
    return [m for arg in typing.get_args(annotation) for m in _models(arg, seen)]


@cache
def setting_names() -> tuple[str, ...]:
    """Every field name of every component's config model, nested models included."""
    names: set[str] = set()
    seen: set[type[BaseModel]] = set()
    pending = [factory.config_model for factory in TEST_FACTORIES]
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            names.add(field.alias or name)
            pending.extend(_models(field.annotation, seen))
    return tuple(sorted(names))


def component_ids(kind: str) -> st.SearchStrategy[str]:
    known = TEST_FACTORIES.known(kind)
    return st.one_of(
        st.sampled_from(known),
        st.sampled_from(known).map(lambda t: t + "/2"),
        st.sampled_from(["", "/", "nope", "otlp/", "a/b/c"]),
    )


YAML_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(
        [
            "1s",
            "100ms",
            "-5s",
            "5m",
            "1h30m",
            "0",
            "1e400",
            "nan",
            "127.0.0.1:0",
            "0.0.0.0:99999",
            "http://127.0.0.1:1",
            "${env:HOME}",
            "${env:SPANSCORE_X:-7}",
            "${env:UNSET}",
            "${bad",
            "$$",
            "${env:1X}",
            "${env:SPANSCORE_X:-${env:Y}}",
            "/nonexistent/file.pem",
            "~",
            "yes",
            "off",
        ]
    ),
)


def yaml_values(max_leaves: int = 6) -> st.SearchStrategy:
    keys = st.one_of(st.sampled_from(setting_names()), st.text(max_size=8))
    return st.recursive(
        YAML_SCALARS,
        lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=4)),
        max_leaves=max_leaves,
    )


def settings_for() -> st.SearchStrategy:
    names = st.sampled_from(setting_names())
    return st.one_of(st.none(), st.dictionaries(names, yaml_values(4), max_size=4), yaml_values(2))


def section(kind: str) -> st.SearchStrategy:
    mapping = st.dictionaries(component_ids(kind), settings_for(), max_size=3)
    return st.one_of(mapping, mapping, yaml_values(2))


def id_list(kind: str) -> st.SearchStrategy:
    return st.one_of(st.lists(component_ids(kind), max_size=3), yaml_values(2))


service = st.fixed_dictionaries(
    {},
    optional={
        "pipelines": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "traces": st.fixed_dictionaries(
                        {},
                        optional={
                            "receivers": id_list("receiver"),
                            "processors": id_list("processor"),
                            "exporters": id_list("exporter"),
                            "span_events": YAML_SCALARS,
                        },
                    ),
                    "metrics": st.fixed_dictionaries(
                        {},
                        optional={
                            "exporters": id_list("exporter"),
                            "receivers": id_list("receiver"),
                            "export_interval": YAML_SCALARS,
                            "span_attributes": yaml_values(2),
                        },
                    ),
                    "logs": st.fixed_dictionaries({}, optional={"exporters": id_list("exporter")}),
                },
            ),
            yaml_values(2),
        ),
        "extensions": id_list("extension"),
        "telemetry": st.one_of(
            st.fixed_dictionaries({"logs": st.fixed_dictionaries({"level": YAML_SCALARS})}), yaml_values(2)
        ),
        "shutdown_timeout": YAML_SCALARS,
    },
)

documents = st.fixed_dictionaries(
    {},
    optional={
        **{name: section(kind) for name, kind in SECTIONS.items()},
        "service": st.one_of(service, service, yaml_values(2)),
        "connectors": yaml_values(2),
    },
)

ENVIRON = {"HOME": "/home/x", "SPANSCORE_X": "3", "Y": "{a: 1}"}


def load(text: str) -> Config | None:
    """Load `text`; None when it is a ConfigError that names each problem."""
    try:
        config = parse_config(text, factories=TEST_FACTORIES, environ=ENVIRON)
    except ConfigError as exc:
        assert exc.problems and all(isinstance(p, str) and ": " in p and p.strip() for p in exc.problems), exc.problems
        return None
    assert isinstance(config, Config) and config.receivers and config.exporters
    return config


@given(documents)
def test_random_documents_load_or_are_a_config_error(document):
    load(yaml.safe_dump(document, allow_unicode=True))


def default_document() -> dict:
    return yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))


def test_the_default_config_loads():
    # The mutations start from a valid document.
    config = parse_config(DEFAULT_CONFIG.read_text(encoding="utf-8"), factories=TEST_FACTORIES, environ=ENVIRON)
    assert [c.id for c in config.receivers] == ["otlp"] and [c.id for c in config.exporters] == ["file", "debug"]


@settings(max_examples=200, deadline=None)
@given(mutated(default_document(), rounds=3))
def test_mutated_default_config_loads_or_is_a_config_error(document):
    load(yaml.safe_dump(document, allow_unicode=True))


@settings(max_examples=200, deadline=None)
@given(text_mutated(DEFAULT_CONFIG.read_text(encoding="utf-8")))
def test_mutated_default_config_text_loads_or_is_a_config_error(text):
    load(text)


@pytest.mark.parametrize("section", ["processors", "receivers", "exporters", "extensions"])
def test_a_scalar_section_is_a_config_error(section):
    document = {
        "receivers": {"otlp": None},
        "exporters": {"debug": None},
        "extensions": {"health_check": None},
        "service": {
            "extensions": ["health_check"],
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["debug"]}},
        },
    }
    document[section] = 5
    with pytest.raises(ConfigError) as error:
        parse_config(yaml.safe_dump(document), factories=TEST_FACTORIES, environ={})
    assert any(p.startswith(f"{section}: expected a mapping") for p in error.value.problems)
