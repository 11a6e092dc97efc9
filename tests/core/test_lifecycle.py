"""One lifecycle for every component: `start()`, then `shutdown(deadline)`, which is safe
without start and safe twice. Checked on every built-in type the service can build."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spanscore.config.components import BUILTIN_FACTORIES
from spanscore.core.component import Component, ComponentFactory
from spanscore.core.trace_exporter import TraceExporter
from spanscore.exporters.prometheus import FACTORY as PROMETHEUS
from spanscore.exporters.score_metrics import ScoreMetrics
from tests.support.null_consumer import NullConsumer

# Settings each type needs to be built here: loopback, ephemeral ports, offline.
SETTINGS = {
    ("receiver", "otlp"): {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}}},
    ("processor", "embedding_metrics"): {"embedder": {"type": "hashing"}},
    ("processor", "ground_truth"): {
        "dataset": str(Path(__file__).resolve().parents[2] / "examples" / "weather-suite.yaml")
    },
    ("stage", "score_router"): {"table": [{"when": {"label": "fail"}, "exporters": ["debug"]}]},
    ("exporter", "otlp"): {"endpoint": "127.0.0.1:9", "tls": {"insecure": True}},
    ("exporter", "otlphttp"): {"endpoint": "http://127.0.0.1:9"},
    ("exporter", "phoenix"): {"endpoint": "http://127.0.0.1:9"},
    ("extension", "health_check"): {"endpoint": "127.0.0.1:0"},
    ("extension", "bearertokenauth"): {"token": "t0k3n"},
    ("stage", "memory_limiter"): {"limit_mib": 4096},
}
BUILDABLE = [f for f in BUILTIN_FACTORIES if f.create is not None]


def build(factory: ComponentFactory, tmp_path) -> Component:
    settings = SETTINGS.get((factory.kind, factory.type), {})
    if factory.type == "file":
        settings = {"path": str(tmp_path / "out.jsonl")}
    if factory.type == "file_storage":
        settings = {"directory": str(tmp_path / "storage")}
    config = factory.config_model.model_validate(settings)
    if factory.kind == "receiver" or factory.type == "memory_limiter":  # it stands before the pipeline
        return factory.create(f"{factory.type}/test", config, NullConsumer())
    return factory.create(f"{factory.type}/test", config)


def soon() -> float:
    return time.monotonic() + 5.0


def test_every_builtin_type_but_the_assembler_and_prometheus_can_be_built():
    # The assembler is built by the service itself; prometheus exports metrics only.
    assert {f.type for f in BUILTIN_FACTORIES if f.create is None} == {"assembler", "prometheus"}
    assert len(BUILDABLE) == 18


@pytest.mark.parametrize("factory", BUILDABLE, ids=lambda f: f"{f.kind}-{f.type}")
async def test_shutdown_is_safe_without_start_and_twice(factory, tmp_path):
    component = build(factory, tmp_path)
    assert isinstance(component, Component)
    if factory.kind == "exporter":
        assert isinstance(component, TraceExporter)
    await component.shutdown(soon())
    await component.shutdown(soon())


@pytest.mark.parametrize("factory", BUILDABLE, ids=lambda f: f"{f.kind}-{f.type}")
async def test_started_component_shuts_down_twice(factory, tmp_path):
    component = build(factory, tmp_path)
    await component.start()
    await component.shutdown(soon())
    await component.shutdown(soon())


async def test_score_metrics_follow_the_same_lifecycle():
    config = PROMETHEUS.config_model.model_validate({"endpoint": "127.0.0.1:0"})
    metrics = ScoreMetrics([lambda host: PROMETHEUS.create_metric_reader("prometheus", config, 1.0, host)])
    await metrics.shutdown(soon())  # never started: nothing to stop
    await metrics.start()
    assert metrics.provider is not None
    await metrics.shutdown(soon())
    await metrics.shutdown(soon())
    assert metrics.provider is None
