"""Worked examples for a judge metric: cases people judged, read from a file.

A file is YAML, a list of examples or a mapping whose only key, `examples`, holds the
list, or JSON Lines when its name ends in `.jsonl` (one example object per line, blank
lines skipped):

```yaml
examples:
  - excerpt: "user_input: Book the cheapest flight under $500 ... final_output: Booked UA 15 for $620."
    reason: The user capped the price at $500; a $620 booking does not do the task.
    score: 0.1                 # optional, within [0, 1]
    label: fail                # optional, pass or fail; at least one of score and label
    trace_id: 5c00e5c00e0000000000000000000001   # optional: where the case came from
    metric: task_completion    # optional; when given, the metric the file is configured for
```

`excerpt` is what the judge is shown of the case and `reason` why the verdict is right;
both are required, non-empty text. A file that teaches the judge wrong teaches every
verdict wrong, so loading is strict like a dataset's: unknown keys and loose types are
errors, and `load_examples` reports every problem at once, each with its item number
(and line, in JSON Lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from spanscore.core.key_path import key_path
from spanscore.core.problem_list import ProblemListError, kind_of, yaml_problem

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
LIST_KEY = "examples"


class ExamplesError(ProblemListError):
    """The file cannot be used; `problems` lists each one as `where: message`."""

    what = "examples"


class WorkedExample(BaseModel):
    """One case people judged: what the judge is shown of it, the verdict, and why."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    excerpt: Text
    reason: Text
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    label: Literal["pass", "fail"] | None = None
    trace_id: Text | None = None
    metric: Text | None = None

    @model_validator(mode="after")
    def _has_a_verdict(self) -> WorkedExample:
        if self.score is None and self.label is None:
            raise PydanticCustomError("no_verdict", "give a score, a label (pass or fail), or both")
        return self


class WorkedExamples(BaseModel):
    """A file's examples in file order; `source` is its path as configured."""

    model_config = ConfigDict(frozen=True)

    source: str
    items: tuple[WorkedExample, ...]


def load_examples(path: str, metric: str | None = None) -> WorkedExamples:
    """Read and check an examples file; `metric` is the metric it is configured for, which
    an item's own `metric` must name. ExamplesError lists every problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ExamplesError([f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ExamplesError([f"cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    return parse_examples(text, jsonl=path.lower().endswith(".jsonl"), source=path, metric=metric)


def parse_examples(text: str, *, jsonl: bool, source: str = "<memory>", metric: str | None = None) -> WorkedExamples:
    problems: list[str] = []
    entries = _jsonl_entries(text, problems) if jsonl else _yaml_entries(text, problems)
    if not entries and not problems:
        problems.append("holds no examples; give at least one, or leave examples out")
    items = []
    for where, raw in entries:
        if not isinstance(raw, dict):
            problems.append(f"{where}: expected a mapping of example fields, got {kind_of(raw)}")
            continue
        try:
            item = WorkedExample.model_validate(raw)
        except ValidationError as exc:
            problems.extend(_pydantic_problems(where, exc))
            continue
        if metric is not None and item.metric is not None and item.metric != metric:
            problems.append(f"{where}.metric: {item.metric!r}, but the file is configured for {metric}")
            continue
        items.append(item)
    if problems:
        raise ExamplesError(problems)
    return WorkedExamples(source=source, items=tuple(items))


def _yaml_entries(text: str, problems: list[str]) -> list[tuple[str, Any]]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problems.append(f"not valid YAML: {yaml_problem(exc)}")
        return []
    if isinstance(raw, dict):
        problems.extend(f"{key}: unknown key; the list goes under {LIST_KEY}" for key in raw if key != LIST_KEY)
        raw = raw.get(LIST_KEY)
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(f"expected a list of examples, or a mapping with an {LIST_KEY} list, got {kind_of(raw)}")
        return []
    return [(f"item {number}", item) for number, item in enumerate(raw, start=1)]


def _jsonl_entries(text: str, problems: list[str]) -> list[tuple[str, Any]]:
    entries = []
    number = 0
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        number += 1
        where = f"item {number} (line {line_number})"
        try:
            entries.append((where, json.loads(line)))
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})")
    return entries


def _pydantic_problems(where: str, exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors(include_url=False):
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "string_too_short":
            message = "must not be empty"
        elif error["type"] not in ("missing", "no_verdict") and not isinstance(error["input"], (dict, list)):
            message += f" (got {error['input']!r})"
        out.append(f"{key_path(where, error['loc'])}: {message}")
    return out
