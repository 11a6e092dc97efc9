"""Who produced a score, and by which revision of its definition.

Every score carries `eval.<metric>.evaluator` (the judge model, the embedder, or `code`)
and `eval.<metric>.revision` (a hash of what defines it: the judge's rubric and
settings, a dataset's content, or the metric code's version), so scores from different
judges or rubric revisions are never averaged together silently: the score metrics carry
both as attributes too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from spanscore.core.version import VERSION

CODE = "code"


@dataclass(frozen=True)
class Provenance:
    evaluator: str
    revision: str
    judged: bool = False  # a language model gave the score (a judge), not code or an embedder


def revision_of(*parts: object) -> str:
    """A short stable hash of everything that defines a metric's scores."""
    digest = hashlib.sha256()
    for part in (VERSION, *parts):
        digest.update(stable_repr(part).encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def stable_repr(value: object) -> str:
    """`repr(value)`, except that sets list their items sorted: a set's order follows its
    items' hashes, which differ from process to process for strings, and a revision must
    be the same in every process that scores by the same definition."""
    if isinstance(value, (set, frozenset)):
        items = ", ".join(sorted(stable_repr(item) for item in value))
        return f"{type(value).__name__}({{{items}}})" if value else repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(map(stable_repr, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(stable_repr, value)) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


CODE_PROVENANCE = Provenance(CODE, revision_of(CODE))
