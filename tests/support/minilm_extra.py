"""The `minilm` extra: a test that needs it skips without it, unless SPANSCORE_REQUIRE_MINILM=1
(as in CI, which installs it), where its absence fails."""

from __future__ import annotations

import os

import pytest

from spanscore.processors.embedders import minilm

REQUIRE_ENV = "SPANSCORE_REQUIRE_MINILM"


def require_extra() -> None:
    missing = minilm.missing_modules()
    if missing:
        message = f"the minilm extra is not installed (missing {', '.join(missing)})"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message}, and {REQUIRE_ENV}=1 requires it")
        pytest.skip(message)
