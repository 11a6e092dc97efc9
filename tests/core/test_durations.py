"""Durations in config, written the way the OpenTelemetry Collector writes them (`1s`,
`500ms`, `2m`, `1h30m`), or a bare number meaning seconds."""

from __future__ import annotations

import pytest

from spanscore.core.durations import parse_duration


@pytest.mark.parametrize(
    "text,seconds", [("1s", 1.0), ("500ms", 0.5), ("2m", 120.0), ("1h30m", 5400.0), (2, 2.0), ("0.25", 0.25)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "1x", "", "-1s", True, "1s2"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)
