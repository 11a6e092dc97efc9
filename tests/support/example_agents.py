"""Running the programs of examples/agents/ as a user would, for their end-to-end tests.

Which Python runs them: $SPANSCORE_EXAMPLES_PYTHON (a venv made from
examples/agents/requirements.txt), else the interpreter running the tests; an example
whose framework is not importable there is skipped, or fails when
SPANSCORE_REQUIRE_EXAMPLES=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"
RUN_TIMEOUT_S = 120
# Only what an example needs reaches it: a developer's own OTEL_* or OPENAI_* settings
# would send it elsewhere.
INHERITED = ("PATH", "HOME", "LANG", "TMPDIR")


def examples_python() -> str:
    named = os.environ.get("SPANSCORE_EXAMPLES_PYTHON")
    if not named:
        return sys.executable
    python = shutil.which(named)
    if python is None:  # named on purpose, so a typo must not turn into skips
        pytest.fail(f"SPANSCORE_EXAMPLES_PYTHON={named} is not an executable")
    return os.path.abspath(python)  # the examples run from their own folder


def missing_modules(python: str, modules: tuple[str, ...]) -> list[str]:
    """The modules `python` cannot find, asked in a subprocess so nothing is imported here."""
    probe = (
        "import importlib.util, sys\n"
        "def found(name):\n"
        "    try:\n"
        "        return importlib.util.find_spec(name) is not None\n"
        "    except ImportError:\n"
        "        return False\n"
        "print(' '.join(m for m in sys.argv[1:] if not found(m)))"
    )
    result = subprocess.run([python, "-c", probe, *modules], check=False, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        return [f"(probe failed: {result.stderr.strip()})"]
    return result.stdout.split()


def require_framework(example: str, modules: tuple[str, ...]) -> str:
    """The Python to run `example` with, which must import `modules`; else a skip (or a
    failure when SPANSCORE_REQUIRE_EXAMPLES=1)."""
    python = examples_python()
    missing = missing_modules(python, modules)
    if missing:
        reason = (
            f"{example}: {python} lacks {', '.join(missing)}; make a venv with "
            f"`pip install -r examples/agents/requirements.txt` and set SPANSCORE_EXAMPLES_PYTHON to its python"
        )
        if os.environ.get("SPANSCORE_REQUIRE_EXAMPLES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return python
