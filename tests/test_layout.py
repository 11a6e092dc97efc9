"""The package's shape: one `spanscore` namespace, every folder shipped, no import cycles.

The layer contracts themselves are import-linter's (`scripts/lint-imports`); these checks
read the sources directly, so they also hold in an editable checkout, where grimp cannot
follow the mapping of several folders into one package.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
UNNAMESPACED = {Path(folder).name for folder in PACKAGE_DIRS.values()} - {"spanscore"}
SOURCE_TREES = ("tests", "bench", "examples")
# What a test module may import from tests/: the shared helpers and the fixture data.
TEST_HELPERS = ("tests.support", "tests.fixtures")


def spanscore_modules() -> dict[str, Path]:
    """Module name -> file, for every module the package-dir mapping installs."""
    modules = {}
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            relative = path.relative_to(base).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            name = ".".join([package, *parts])
            # A subfolder mapped on its own (spanscore.core under spanscore) wins.
            modules.setdefault(name, path)
    return modules


def imported_names(path: Path, module: str, known: set[str] | dict[str, Path] = frozenset()) -> set[str]:
    """Every module `path` imports, at any depth (lazy and TYPE_CHECKING imports too).

    `from package import module` imports the module (as grimp counts it), so it is not
    read as importing the package's `__init__` when `package.module` is `known`.
    """
    is_package = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                names.add(submodule if submodule in known else target)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = spanscore_modules()
    return {name: {m for m in imported_names(path, name, modules) if m in modules} for name, path in modules.items()}


def test_installed_packages_cover_every_source_folder():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    # Folders of data only (no __init__.py) are listed too, so setuptools ships their files.
    data_only = set(PYPROJECT["tool"]["setuptools"]["package-data"]) - {
        name for name, path in spanscore_modules().items() if path.name == "__init__.py"
    }
    on_disk = {name for name, path in spanscore_modules().items() if path.name == "__init__.py"}
    assert on_disk == listed - data_only


def test_no_code_imports_the_project_folders_by_their_bare_names():
    offenders = []
    trees = [ROOT / folder for folder in PACKAGE_DIRS.values()] + [ROOT / tree for tree in SOURCE_TREES]
    for tree in trees:
        for path in tree.rglob("*.py"):
            for name in imported_names(path, "tests"):
                if name.split(".")[0] in UNNAMESPACED:
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_test_modules_import_no_other_test_module():
    # Helpers shared by test modules live in tests/support, not in a test module or a test
    # folder's __init__, so running or moving one test module never depends on another.
    tests = ROOT / "tests"
    parts = [p.relative_to(ROOT).with_suffix("").parts for p in tests.rglob("*.py")]
    modules = {".".join(name[:-1] if name[-1] == "__init__" else name) for name in parts}
    offenders = []
    for path in sorted(tests.rglob("test_*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for name in sorted(imported_names(path, module, modules)):
            if name.split(".")[0] == "tests" and not any(name == h or name.startswith(h + ".") for h in TEST_HELPERS):
                offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert offenders == []


def test_no_module_imports_the_package_root():
    # The root re-exports the public API, so a submodule importing it would close a cycle.
    graph = import_graph()
    importers = sorted(name for name, imports in graph.items() if "spanscore" in imports)
    assert importers == []


def test_the_import_graph_has_no_cycles():
    # Explicit imports only: a package's __init__ importing its own modules is not a
    # cycle with them, though each of them runs that __init__ first.
    assert _cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}) == [["a", "b", "c"], ["e"]]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [c for c in _strongly_connected(graph) if len(c) > 1 or c[0] in graph.get(c[0], ())]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components sorted, for readable failures."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for successor in edges:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return sorted(found)
