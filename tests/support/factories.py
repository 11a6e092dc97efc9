"""The component table the tests run with: the built-ins plus the test-only processors."""

from __future__ import annotations

from spanscore.config.components import build_factories
from tests.support import recording_processor, span_metric, toy_metric

# Installed plugins stay out, so the suite sees the same types wherever it runs.
TEST_FACTORIES = build_factories(
    extra=[toy_metric.FACTORY, recording_processor.FACTORY, span_metric.FACTORY], plugins=False
)
