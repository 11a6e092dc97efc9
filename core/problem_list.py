"""The error of a file read item by item: every problem found, each as `where: message`.

The config, eval-suite datasets and judges' worked examples are each checked whole, so one
run shows all that needs fixing; they raise a subclass of `ProblemListError`, which names
what was invalid, and phrase values and YAML errors the same way.
"""

from __future__ import annotations

from typing import Any, ClassVar

import yaml


class ProblemListError(Exception):
    """The file cannot be used; `problems` lists each one as `where: message`."""

    what: ClassVar[str]  # what was read, as the message's first line names it: "invalid <what>:"

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"invalid {self.what}:\n" + "\n".join(f"  {p}" for p in problems))


def kind_of(value: Any) -> str:
    """A value as a problem names it: `null`, `a mapping`, `a list`, or its type and value."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return f"{type(value).__name__} {value!r}"


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: what went wrong, and where."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)
    what = ", ".join(part for part in (exc.context, exc.problem) if part) or "unreadable"
    mark = exc.problem_mark or exc.context_mark
    return f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what
