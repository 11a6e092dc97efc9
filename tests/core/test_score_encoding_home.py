"""Every `eval.` key is spelled in one module, core/score_encoding.py: the package's other
code builds and reads the keys through it, so a key cannot drift between a writer and
its readers."""

from __future__ import annotations

import ast
import re

from tests.test_layout import PACKAGE_DIRS, ROOT

ENCODING_MODULE = ROOT / "core" / "score_encoding.py"
# A string that is, or begins, an `eval.` key (`"eval."`, `"eval.case.id"`, `f"eval.{metric}.score"`).
KEY_LITERAL = re.compile(r"^eval(\.|$)")


def key_literals(source: str) -> list[str]:
    """`line: text` of each string constant or f-string in `source` that begins an `eval.` key."""
    tree = ast.parse(source)
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        head = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
        if id(node) in parts or not (isinstance(head, ast.Constant) and isinstance(head.value, str)):
            continue
        if KEY_LITERAL.match(head.value):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_eval_keys_are_spelled_only_in_the_encoding_module():
    folders = {ROOT / folder for folder in PACKAGE_DIRS.values()} | {ROOT / "bench"}
    files = sorted(path for folder in folders for path in folder.rglob("*.py"))
    assert ENCODING_MODULE in files and len(files) > 100
    spelled = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in files
        if path != ENCODING_MODULE
        for hit in key_literals(path.read_text())
    ]
    assert spelled == [], "build or read these keys through spanscore.core.score_encoding:\n" + "\n".join(spelled)


def test_the_scan_finds_key_literals():
    source = 'A = "eval.case.id"\nB = f"eval.{name}.score"\nC = key.startswith("eval.")\nD = "not eval.x"\nE = "eval"\n'
    assert key_literals(source) == ["1: 'eval.case.id'", "2: f'eval.{name}.score'", "3: 'eval.'", "5: 'eval'"]
