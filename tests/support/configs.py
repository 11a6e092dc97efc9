"""Config texts for the loader's tests: the smallest config spanscore accepts, and the
problems a config is refused with (parsed with the test component table, no environment)."""

from __future__ import annotations

import pytest

from spanscore.config.loader import ConfigError, parse_config
from tests.support.factories import TEST_FACTORIES

MINIMAL = """
receivers: {otlp: {protocols: {grpc: {endpoint: 127.0.0.1:4317}}}}
exporters: {debug: {}}
service: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}
"""


def problems_of(text: str, environ: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_config(text, environ=environ or {}, factories=TEST_FACTORIES)
    return error.value.problems
