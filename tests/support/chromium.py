"""Debian's headless Chromium for the tests that look at a page: found, or the test skipped
(failed when SPANSCORE_REQUIRE_CHROMIUM=1, as in CI, which installs it)."""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_ENV = "SPANSCORE_REQUIRE_CHROMIUM"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but chromium is not installed (apt-get install chromium)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return found
