"""An eval-suite dataset: the cases an agent is run on, and what each attempt is graded against.

A dataset file is YAML (`.yaml`, `.yml`: a mapping with a `cases:` list) or JSON Lines
(`.jsonl`: one case object per line; blank lines are skipped):

```yaml
cases:
  - id: oslo-weather
    user_instruction: Find out what to wear in Oslo today.  # optional overall task
    turns:                            # optional scripted user messages, in order
      - message: What's the weather in Oslo?
        expected_response: Snowing, -3C                     # optional ground-truth answer
    subgoals:                         # grading notes
      - details: Tells the user it is snowing in Oslo
        turn: 0                       # optional, 0-based: judged at that turn only
    expected_tool_calls:
      - tool: weather
        turn: 0                       # optional
        parameters: [{name: city, value: Oslo}]   # or {name: city, check: "a Norwegian city"}
        output: {check: "a weather report"}       # optional, value or check
    tool_sequence_matters: false      # default false
```

Ground truth that is silently wrong grades every attempt wrong, so loading is strict:
unknown keys and loose types (`turn: "0"`, `tool_sequence_matters: "no"`) are errors,
and `load_dataset` reports every problem at once, each prefixed with where it is
(`cases[2] (id oslo-weather).subgoals[0].turn: ...`, or `line 3 (id ...)` in JSON Lines).
Checks that compare fields (a `turn` index against the scripted turns, ids and first
messages across cases) run on cases whose own fields are valid.

An expected item (a parameter, an output) gives exactly one of `value`, compared as an
exact JSON value, or `check`, a text a judge decides the actual value against.
`value: null` is given: it expects JSON null, unlike leaving `value` out; `kind` says
which one an item carries. Texts are whitespace-trimmed and must not be empty.

Attempts are joined to their case by id or, failing that, by the session's first user
message: the case whose first scripted message (else its `user_instruction`) equals it,
trimmed. Two cases that start alike would make that join ambiguous, so that is a load
error, as are duplicate ids.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from spanscore.core.key_path import key_path
from spanscore.core.problem_list import ProblemListError, kind_of, yaml_problem

Format = Literal["yaml", "jsonl"]
FORMATS: dict[str, Format] = {".yaml": "yaml", ".yml": "yaml", ".jsonl": "jsonl"}

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
TurnIndex = Annotated[int, Field(ge=0)]

# A validator that finds several problems at once raises this error type; its context
# holds (key path relative to the error's location, message) pairs, which the loader
# reports one by one at their exact paths.
_PROBLEMS = "ground_truth_problems"
_OWN_ERRORS = {_PROBLEMS, "check_null", "not_json", "value_and_check", "value_or_check"}


class DatasetError(ProblemListError):
    """The dataset cannot be used; `problems` lists each one as `where: message`."""

    what = "dataset"


class _Strict(BaseModel):
    """Unknown keys and loose types are errors: a typo in ground truth grades silently wrong."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _raise_problems(problems: list[tuple[str, str]]) -> None:
    if problems:
        summary = "; ".join(f"{path}: {message}" if path else message for path, message in problems)
        raise PydanticCustomError(_PROBLEMS, "{summary}", {"summary": summary, "problems": tuple(problems)})


class Expected(_Strict):
    """What an actual value must be: exactly `value` (any JSON value, null included) or pass `check`."""

    value: Any = None
    check: Text | None = None

    @field_validator("check", mode="before")
    @classmethod
    def _check_is_not_null(cls, check: Any) -> Any:
        if check is None:
            raise PydanticCustomError("check_null", "give the check as text, or leave check out")
        return check

    @field_validator("value")
    @classmethod
    def _value_is_json(cls, value: Any) -> Any:
        problem = _json_problem(value)
        if problem is not None:
            raise PydanticCustomError("not_json", "{problem}", {"problem": problem})
        return value

    @model_validator(mode="after")
    def _value_or_check(self) -> Expected:
        given = {"value", "check"} & self.model_fields_set
        if len(given) == 2:
            raise PydanticCustomError("value_and_check", "give either value or check, not both")
        if not given:
            raise PydanticCustomError("value_or_check", "give either value or check")
        return self

    @property
    def kind(self) -> Literal["value", "check"]:
        """Which one this item carries; a `value` item's value may be None (JSON null)."""
        return "value" if self.check is None else "check"


class ExpectedArgument(Expected):
    """One argument of an expected call, by its exact name."""

    name: str = Field(min_length=1)


class ExpectedToolCall(_Strict):
    """A call the agent should make: matched against the actual calls of its turn (all when None)."""

    tool: Text
    turn: TurnIndex | None = None
    parameters: list[ExpectedArgument] = []
    output: Expected | None = None

    @model_validator(mode="after")
    def _parameter_names_unique(self) -> ExpectedToolCall:
        first: dict[str, int] = {}
        problems = []
        for i, parameter in enumerate(self.parameters):
            earlier = first.setdefault(parameter.name, i)
            if earlier != i:
                problems.append((f"parameters[{i}].name", f"duplicate name; parameters[{earlier}] has the same name"))
        _raise_problems(problems)
        return self


class Turn(_Strict):
    """One scripted user message, and optionally the answer the agent should give to it."""

    message: Text
    expected_response: Text | None = None


class Subgoal(_Strict):
    """A grading note a judge decides as complete or not; with a `turn`, judged at that turn only."""

    details: Text
    turn: TurnIndex | None = None


class Case(_Strict):
    """One task of the suite; every attempt at it is graded against these expectations."""

    id: Text
    user_instruction: Text | None = None
    turns: list[Turn] = []
    subgoals: list[Subgoal] = []
    expected_tool_calls: list[ExpectedToolCall] = []
    tool_sequence_matters: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        problems = []
        if self.turns:
            last = len(self.turns) - 1
            for key, items in (("subgoals", self.subgoals), ("expected_tool_calls", self.expected_tool_calls)):
                for i, item in enumerate(items):
                    if item.turn is not None and item.turn > last:
                        message = f"turn {item.turn} is past the last scripted turn, {last} (turns count from 0)"
                        problems.append((f"{key}[{i}].turn", message))
        if not (self.subgoals or self.expected_tool_calls or any(t.expected_response for t in self.turns)):
            problems.append(("", "grades nothing; give subgoals, expected_tool_calls or a turn's expected_response"))
        _raise_problems(problems)
        return self

    @property
    def judged_checks(self) -> list[str]:
        """What in this case only a judge can grade; without one, its attempts are ungraded."""
        kinds = []
        if self.subgoals:
            kinds.append("subgoals")
        if any(t.expected_response is not None for t in self.turns):
            kinds.append("expected responses")
        items = [e for c in self.expected_tool_calls for e in (*c.parameters, c.output) if e is not None]
        if any(e.kind == "check" for e in items):
            kinds.append("check: items")
        return kinds

    @property
    def first_message(self) -> str | None:
        """What a session's first user message is matched against: the first turn's, else the instruction."""
        return self.turns[0].message if self.turns else self.user_instruction


class Dataset(_Strict):
    """The cases of a suite, with unique ids and unambiguous first messages."""

    cases: list[Case] = Field(min_length=1)
    _by_id: dict[str, Case] = PrivateAttr(default_factory=dict)
    _by_first_message: dict[str, Case] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _joinable(self) -> Dataset:
        _raise_problems(
            [(f"cases[{i}].{path}", message) for i, path, message in _clashes(self.cases, lambda j: f"cases[{j}]")]
        )
        return self

    def model_post_init(self, context: Any) -> None:
        for case in self.cases:
            self._by_id.setdefault(case.id, case)
            if case.first_message is not None:
                self._by_first_message.setdefault(case.first_message, case)

    def by_id(self, case_id: str) -> Case | None:
        return self._by_id.get(case_id)

    def match_first_message(self, text: str) -> Case | None:
        """The join fallback: the case whose first message (else instruction) equals `text`, trimmed."""
        return self._by_first_message.get(text.strip())


def load_dataset(path: str | Path) -> Dataset:
    """Read and validate a dataset file, its format chosen by extension; DatasetError lists every problem."""
    path = Path(path)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        suffix = path.suffix or "(no extension)"
        raise DatasetError([f"{path}: unknown dataset format {suffix!r}; name the file .yaml, .yml or .jsonl"])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise DatasetError([f"{path}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    return parse_dataset(text, fmt, source=str(path))


def parse_dataset(text: str, fmt: Format, source: str = "<memory>") -> Dataset:
    """Validate a dataset's text; `source` names it in file-level problems."""
    problems: list[str] = []
    entries = _yaml_entries(text, source, problems) if fmt == "yaml" else _jsonl_entries(text, source, problems)

    per_entry: list[list[str]] = [[] for _ in entries]
    valid: list[tuple[int, Case]] = []
    for n, (position, raw) in enumerate(entries):
        where = _label(position, raw)
        if not isinstance(raw, dict):
            per_entry[n].append(f"{where}: expected a mapping of case fields, got {kind_of(raw)}")
            continue
        try:
            valid.append((n, Case.model_validate(raw)))
        except ValidationError as exc:
            per_entry[n].extend(_pydantic_problems(where, exc))

    cases = [case for _, case in valid]
    for i, path, message in _clashes(cases, lambda j: entries[valid[j][0]][0]):
        n = valid[i][0]
        per_entry[n].append(f"{_label(entries[n][0], entries[n][1])}.{path}: {message}")
    problems.extend(p for entry in per_entry for p in entry)
    if problems:
        raise DatasetError(problems)
    return Dataset(cases=cases)


def _yaml_entries(text: str, source: str, problems: list[str]) -> list[tuple[str, Any]]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problems.append(f"{source}: not valid YAML: {yaml_problem(exc)}")
        return []
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{source}: expected a mapping with a cases list, got {kind_of(raw)}")
        return []
    problems.extend(f"{key}: unknown key" for key in raw if key != "cases")
    cases = raw.get("cases")
    if cases is None or cases == []:
        problems.append("cases: no cases; a dataset needs at least one")
        return []
    if not isinstance(cases, list):
        problems.append(f"cases: expected a list of cases, got {kind_of(cases)}")
        return []
    return [(f"cases[{i}]", case) for i, case in enumerate(cases)]


def _jsonl_entries(text: str, source: str, problems: list[str]) -> list[tuple[str, Any]]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not valid JSON: {exc.msg} (column {exc.colno})")
    if not entries and not problems:
        problems.append(f"{source}: no cases; a dataset needs at least one")
    return entries


def _clashes(cases: Sequence[Case], position: Callable[[int], str]) -> list[tuple[int, str, str]]:
    """(index, key path, message) for each case that repeats an earlier case's id or first message."""
    ids: dict[str, int] = {}
    first_messages: dict[str, int] = {}
    out = []
    for i, case in enumerate(cases):
        earlier = ids.setdefault(case.id, i)
        if earlier != i:
            out.append((i, "id", f"duplicate id; {position(earlier)} has the same id"))
        if case.first_message is not None:
            earlier = first_messages.setdefault(case.first_message, i)
            if earlier != i:
                path = "turns[0].message" if case.turns else "user_instruction"
                message = (
                    f"{position(earlier)} starts with the same user message, "
                    "so a session starting with it cannot be joined to one case"
                )
                out.append((i, path, message))
    return out


def _label(position: str, raw: Any) -> str:
    """`cases[2] (id oslo-weather)`: the position, and the id when the case gives a usable one."""
    case_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(case_id, str) and case_id.strip():
        return f"{position} (id {case_id.strip()})"
    return position


def _pydantic_problems(prefix: str, exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors(include_url=False):
        path = key_path(prefix, error["loc"])
        if error["type"] == _PROBLEMS and "ctx" in error:
            for subpath, message in error["ctx"]["problems"]:
                out.append(f"{_join(path, subpath)}: {message}")
            continue
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif error["type"] == "string_too_short":
            message = f"must not be empty (got {error['input']!r})"
        elif error["type"] in ("model_type", "dict_type"):
            message = f"expected a mapping, got {kind_of(error['input'])}"
        elif error["type"] not in _OWN_ERRORS | {"missing"} and not isinstance(error["input"], (dict, list)):
            message += f" (got {error['input']!r})"
        out.append(f"{path}: {message}")
    return out


def _join(path: str, subpath: str) -> str:
    if not subpath:
        return path
    return path + subpath if subpath.startswith("[") else f"{path}.{subpath}"


def _json_problem(value: Any) -> str | None:
    """Why `value` is not a JSON value (YAML also reads dates, sets, binary, NaN), or None."""
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} is not a JSON number"
    if isinstance(value, list):
        return next((p for p in map(_json_problem, value) if p is not None), None)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} is not a string, as JSON object keys are; quote it"
            problem = _json_problem(item)
            if problem is not None:
                return problem
        return None
    return f"{value} reads as a {type(value).__name__}, not a JSON value; quote it to compare the text"
