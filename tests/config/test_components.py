"""The component table: built-ins listed explicitly, plugins from entry points."""

from __future__ import annotations

from importlib.metadata import EntryPoint

from spanscore.config.components import BUILTIN_FACTORIES, ENTRY_POINT_GROUP, Factories, _add_plugin, build_factories
from spanscore.core.component import ComponentFactory
from spanscore.processors.session_metrics import FACTORY as SESSION_METRICS


def plugin(value: str) -> EntryPoint:
    return EntryPoint(name="example", value=value, group=ENTRY_POINT_GROUP)


def test_builtins_are_known_by_kind():
    factories = build_factories(plugins=False)
    assert factories.known("receiver") == ["otlp"]
    assert factories.known("processor") == [
        "checks",
        "embedding_metrics",
        "failure_localization",
        "ground_truth",
        "judge_metrics",
        "rag_metrics",
        "session_metrics",
    ]
    assert factories.known("stage") == ["assembler", "memory_limiter", "score_router"]
    assert factories.known_in("processors") == sorted(factories.known("processor") + factories.known("stage"))
    assert factories.known("exporter") == ["debug", "file", "otlp", "otlphttp", "phoenix", "prometheus"]
    assert factories.known("extension") == ["bearertokenauth", "file_storage", "health_check"]
    assert sorted(f.type for f in factories) == sorted(f.type for f in BUILTIN_FACTORIES)


def test_a_plugin_cannot_replace_a_builtin_type():
    clash = ComponentFactory("processor", "session_metrics", SESSION_METRICS.config_model, SESSION_METRICS.create)
    factories = build_factories(extra=[clash], plugins=False)
    assert factories.lookup("processor", "session_metrics") is SESSION_METRICS
    assert factories.problems == ["extra: processor type 'session_metrics' is already defined; ignored"]


def test_a_plugin_cannot_take_a_stage_type_nor_add_a_stage():
    # Stages are written among the processors: a processor named like one would be ambiguous.
    named_like_a_stage = ComponentFactory(
        "processor", "assembler", SESSION_METRICS.config_model, SESSION_METRICS.create
    )
    new_stage = ComponentFactory("stage", "sampler", SESSION_METRICS.config_model, SESSION_METRICS.create)
    factories = build_factories(extra=[named_like_a_stage, new_stage], plugins=False)
    assert factories.lookup("processor", "assembler") is None and factories.known("stage") == [
        "assembler",
        "memory_limiter",
        "score_router",
    ]
    assert factories.problems == [
        "extra: processor type 'assembler' is already defined; ignored",
        "extra: the pipeline's stages are spanscore's own; 'sampler' ignored",
    ]


def test_a_plugin_that_fails_to_import_is_reported_and_skipped():
    factories = Factories()
    _add_plugin(factories, plugin("spanscore_no_such_module:FACTORY"))
    assert list(factories) == []
    assert factories.problems == [
        "plugin example (spanscore_no_such_module:FACTORY): cannot be loaded: "
        "ModuleNotFoundError: No module named 'spanscore_no_such_module'"
    ]


def test_a_plugin_entry_point_must_name_a_factory():
    factories = Factories()
    _add_plugin(factories, plugin("spanscore.core.component:component_type"))
    assert list(factories) == []
    assert factories.problems == [
        "plugin example (spanscore.core.component:component_type): is a function, not a ComponentFactory; ignored"
    ]


def test_a_plugin_entry_point_adds_its_type():
    factories = Factories()
    _add_plugin(factories, plugin("spanscore.processors.session_metrics:FACTORY"))
    assert factories.lookup("processor", "session_metrics") is SESSION_METRICS
    assert factories.problems == []
