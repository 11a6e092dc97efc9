"""Client errors logged a line per class and interval: the first with its detail, quoted;
then a count at the end of each interval while they keep coming."""

from __future__ import annotations

import asyncio
import logging

import pytest

from spanscore.core.client_errors import ClientErrorLog

INTERVAL_S = 1.0  # long enough that a busy machine does not blur the intervals


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="tests.client_errors")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "tests.client_errors"]


async def test_the_first_is_logged_the_rest_counted_once_per_interval(lines):
    errors = ClientErrorLog(logging.getLogger("tests.client_errors"), INTERVAL_S)
    for n in range(1000):
        errors.record("401 bad credentials", f"from 10.0.0.{n % 250}")
    assert lines() == ["401 bad credentials: from 10.0.0.0 (a client error; more in the next 1s are counted)"]
    await asyncio.sleep(INTERVAL_S * 1.5)
    assert lines()[1:] == ["401 bad credentials: 999 more in the last 1s"]
    errors.record("401 bad credentials", "from 10.0.0.1")  # still coming: counted in the next interval
    await asyncio.sleep(INTERVAL_S)
    assert lines()[2:] == ["401 bad credentials: 1 more in the last 1s"]
    await asyncio.sleep(INTERVAL_S * 1.5)  # a quiet interval ends the count
    assert len(lines()) == 3
    errors.record("401 bad credentials", "from 10.0.0.2")
    assert lines()[3].startswith("401 bad credentials: from 10.0.0.2 (a client error;")
    errors.flush()


async def test_each_class_has_its_own_line_and_flush_logs_what_is_counted(lines):
    errors = ClientErrorLog(logging.getLogger("tests.client_errors"), 60)
    for _ in range(3):
        errors.record("400 malformed", "x")
        errors.record("503 full", "y", logging.WARNING)
    errors.flush()
    assert [line.split(" (")[0] for line in lines()] == [
        "400 malformed: x",
        "503 full: y",
        "400 malformed: 2 more in the last 0ms",
        "503 full: 2 more in the last 0ms",
    ]


async def test_the_detail_is_escaped_and_cut_short(lines):
    errors = ClientErrorLog(logging.getLogger("tests.client_errors"), 60)
    errors.record("400 malformed", "forged\n2025-01-01 ERROR spanscore: \x1b[2J" + "x" * 100_000)
    errors.flush()
    (line,) = lines()
    assert "\n" not in line and "\x1b" not in line and len(line) < 400
    assert line.startswith("400 malformed: forged\\n2025-01-01 ERROR spanscore: \\x1b[2J")
