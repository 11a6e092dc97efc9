"""Tool calls checked against ground truth: agent_inspect's ToolCorrectnessMetric matching.

A case may list the tool calls the agent is expected to make. Each expected call names
a `tool`, its `parameters` (each a `name` with either an exact `value` or a `check`
text), optionally the `output` the call should return (`value` or `check`), and
optionally the 0-based `turn` of the session it belongs to.

An expected call matches the FIRST actual call, in its turn (any turn when `turn` is
None), whose name equals the tool's (both whitespace-trimmed, then exact) and whose
parameters and output all pass. Each actual call matches at most one expected call:
expected calls are matched in their listed order, each taking the first passing actual
call not already taken (greedy, not an optimal assignment). Per item:

- `value`: `json_equal` of the expected and the actual value;
- `check`: decided by the caller's `check(check_text, actual_value) -> bool` (in the
  pipeline, a judge's majority vote);
- a parameter the actual call lacks fails; parameters the actual call has beyond the
  expected ones are ignored;
- an `output` item against a call with no recorded output compares with None.

Values are compared as given: arguments and outputs that arrive as JSON text must be
decoded first, or an expected 5 will never equal the string "5".

tool_call_accuracy = matched expected calls / expected calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spanscore.core.json_values import json_equal


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


# The value of an item that has none (a `check` item): distinct from None, JSON null.
UNSET: Any = _Unset()

REPR_LIMIT = 80  # values longer than this are cut in the reasons


@dataclass(frozen=True)
class ExpectedParameter:
    """One expected parameter: `name` with either an exact `value` or a `check` text."""

    name: str
    value: Any = UNSET
    check: str | None = None

    def __post_init__(self) -> None:
        _check_item(self.value, self.check, f"parameter {self.name!r}")


@dataclass(frozen=True)
class ExpectedOutput:
    """The output an expected call should return: either an exact `value` or a `check` text."""

    value: Any = UNSET
    check: str | None = None

    def __post_init__(self) -> None:
        _check_item(self.value, self.check, "output")


@dataclass(frozen=True)
class ExpectedCall:
    """A tool call the case expects, in 0-based session `turn` (None: any turn)."""

    tool: str
    parameters: tuple[ExpectedParameter, ...] = ()
    output: ExpectedOutput | None = None
    turn: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool.strip():
            raise ValueError(f"expected call tool must be a non-empty string, got {self.tool!r}")
        if self.turn is not None and (isinstance(self.turn, bool) or not isinstance(self.turn, int) or self.turn < 0):
            raise ValueError(f"expected call turn must be None or an int >= 0, got {self.turn!r}")
        if isinstance(self.parameters, (str, Mapping)) or not isinstance(self.parameters, Sequence):
            raise ValueError(f"parameters must be a list of {{name, value | check}}, got {self.parameters!r}")
        object.__setattr__(self, "parameters", tuple(_parameter(item) for item in self.parameters))
        object.__setattr__(self, "output", _output(self.output))


@dataclass(frozen=True)
class ActualCall:
    """A tool call found in the session: its 0-based turn, name, arguments and output."""

    turn: int
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    output: Any = None


@dataclass(frozen=True)
class CallMatch:
    """The outcome for one expected call.

    `actual_index` is the position of the matched call in the actual calls given (None
    when not matched); `reason` says why it did not match (None when it did).
    """

    matched: bool
    actual_index: int | None = None
    reason: str | None = None


Check = Callable[[str, Any], bool]


def _check_item(value: Any, check: str | None, what: str) -> None:
    if value is not UNSET and check is not None:
        raise ValueError(f"{what} has both a value and a check; give one")
    if value is UNSET and check is None:
        raise ValueError(f"{what} has neither a value nor a check; give one")
    if check is not None and (not isinstance(check, str) or not check.strip()):
        raise ValueError(f"{what}: check must be a non-empty string, got {check!r}")


def _parameter(item: ExpectedParameter | Mapping[str, Any]) -> ExpectedParameter:
    if isinstance(item, ExpectedParameter):
        return item
    if not isinstance(item, Mapping) or "name" not in item:
        raise ValueError(f"a parameter must be an ExpectedParameter or a mapping with a name, got {item!r}")
    unknown = set(item) - {"name", "value", "check"}
    if unknown:
        raise ValueError(f"unknown parameter field(s) {sorted(unknown)}")
    return ExpectedParameter(name=item["name"], value=item.get("value", UNSET), check=item.get("check"))


def _output(item: ExpectedOutput | Mapping[str, Any] | None) -> ExpectedOutput | None:
    if item is None or isinstance(item, ExpectedOutput):
        return item
    if not isinstance(item, Mapping):
        raise ValueError(f"output must be an ExpectedOutput, a mapping or None, got {item!r}")
    unknown = set(item) - {"value", "check"}
    if unknown:
        raise ValueError(f"unknown output field(s) {sorted(unknown)}")
    return ExpectedOutput(value=item.get("value", UNSET), check=item.get("check"))


def as_expected_call(item: ExpectedCall | Mapping[str, Any], where: str = "expected call") -> ExpectedCall:
    """An `ExpectedCall` from itself or a mapping {tool, turn?, parameters?, output?}.

    In a mapping, a parameter or output with a `value` key holds that value, null
    included; one with a `check` key is checked. ValueError names the malformed item.
    """
    if isinstance(item, ExpectedCall):
        return item
    if not isinstance(item, Mapping) or "tool" not in item:
        raise ValueError(f"{where}: must be an ExpectedCall or a mapping with a tool, got {item!r}")
    unknown = set(item) - {"tool", "turn", "parameters", "output"}
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
    try:
        return ExpectedCall(
            tool=item["tool"],
            parameters=item.get("parameters") or (),
            output=item.get("output"),
            turn=item.get("turn"),
        )
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def as_actual_call(item: ActualCall | Sequence[Any], where: str = "actual call") -> ActualCall:
    """An `ActualCall` from itself or a (turn_index, name, arguments, output) tuple."""
    if isinstance(item, ActualCall):
        call = item
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 4:
        call = ActualCall(*item)
    else:
        raise ValueError(f"{where}: must be an ActualCall or a (turn, name, arguments, output) tuple, got {item!r}")
    if isinstance(call.turn, bool) or not isinstance(call.turn, int) or call.turn < 0:
        raise ValueError(f"{where}: turn must be an int >= 0, got {call.turn!r}")
    if not isinstance(call.name, str):
        raise ValueError(f"{where}: name must be a string, got {call.name!r}")
    if not isinstance(call.arguments, Mapping):
        raise ValueError(f"{where}: arguments must be a mapping, got {call.arguments!r}")
    return call


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= REPR_LIMIT else text[: REPR_LIMIT - 1] + "…"


def _label(expected: ExpectedCall, index: int) -> str:
    return f"expected call {index} ({expected.tool.strip()})"


def _require_check(expected: Sequence[ExpectedCall], check: Check | None) -> None:
    """ValueError naming the first check item when there is no `check` callable to decide it."""
    if check is not None:
        return
    for index, call in enumerate(expected):
        for parameter in call.parameters:
            if parameter.check is not None:
                raise ValueError(
                    f"{_label(call, index)}, parameter {parameter.name!r}, has a check "
                    f"({parameter.check!r}) but no check function was given"
                )
        if call.output is not None and call.output.check is not None:
            raise ValueError(
                f"{_label(call, index)}, output, has a check ({call.output.check!r}) but no check function was given"
            )


def _passes(
    wanted: Any,
    check_text: str | None,
    actual: Any,
    check: Check | None,
) -> bool:
    if check_text is not None:
        assert check is not None  # _require_check ran first
        return bool(check(check_text, actual))
    return json_equal(wanted, actual)


def _mismatch(expected: ExpectedCall, actual: ActualCall, check: Check | None) -> str | None:
    """Why `actual` does not satisfy `expected`'s parameters and output; None when it does.

    Items are tried in order (parameters, then output) and the first failure is the
    reason, so a check is only asked for when every item before it passed.
    """
    name = expected.tool.strip()
    for parameter in expected.parameters:
        if parameter.name not in actual.arguments:
            return f"{name} called without {parameter.name}"
        value = actual.arguments[parameter.name]
        if not _passes(parameter.value, parameter.check, value, check):
            if parameter.check is not None:
                return f"{name} called with {parameter.name}={_show(value)}, which fails the check {parameter.check!r}"
            return f"{name} called with {parameter.name}={_show(value)}, expected {_show(parameter.value)}"
    if expected.output is not None and not _passes(expected.output.value, expected.output.check, actual.output, check):
        if expected.output.check is not None:
            return f"{name} returned {_show(actual.output)}, which fails the check {expected.output.check!r}"
        return f"{name} returned {_show(actual.output)}, expected {_show(expected.output.value)}"
    return None


def match_expected_calls(
    expected: Sequence[ExpectedCall | Mapping[str, Any]],
    actual: Sequence[ActualCall | Sequence[Any]],
    check: Check | None = None,
) -> list[CallMatch]:
    """Match each expected call to the first free actual call that satisfies it.

    Returns one `CallMatch` per expected call, in order. Expected calls are dataclasses
    or mappings (see `as_expected_call`); actual calls are `ActualCall`s or
    (turn_index, name, arguments, output) tuples in session order. `check(check_text,
    actual_value)` decides `check` items; without it, any `check` item raises ValueError
    naming the item before anything is matched, so a missing judge never reads as a
    failed call.
    """
    expected_calls = [as_expected_call(item, f"expected call {index}") for index, item in enumerate(expected)]
    actual_calls = [as_actual_call(item, f"actual call {index}") for index, item in enumerate(actual)]
    _require_check(expected_calls, check)

    used: set[int] = set()
    matches = []
    for call in expected_calls:
        name = call.tool.strip()
        scope = "" if call.turn is None else f" in turn {call.turn}"
        candidates = [
            index
            for index, candidate in enumerate(actual_calls)
            if (call.turn is None or candidate.turn == call.turn) and candidate.name.strip() == name
        ]
        free = [index for index in candidates if index not in used]
        if not candidates:
            matches.append(CallMatch(matched=False, reason=f"no call to {name}{scope}"))
            continue
        if not free:
            matches.append(
                CallMatch(
                    matched=False,
                    reason=f"every call to {name}{scope} already matched an earlier expected call",
                )
            )
            continue
        reasons = []
        for index in free:
            reason = _mismatch(call, actual_calls[index], check)
            if reason is None:
                used.add(index)
                matches.append(CallMatch(matched=True, actual_index=index))
                break
            reasons.append(reason)
        else:
            if len(free) == 1:
                matches.append(CallMatch(matched=False, reason=reasons[0]))
            else:
                matches.append(
                    CallMatch(
                        matched=False,
                        reason=f"none of the {len(free)} calls to {name}{scope} matched; the first: {reasons[0]}",
                    )
                )
    return matches


def tool_call_accuracy(matches: Sequence[CallMatch | bool]) -> float:
    """Matched expected calls / expected calls.

    Takes `CallMatch`es or plain booleans. No expected calls raises ValueError: the
    ratio is undefined, and agent_inspect raises on it too; a case without expected
    calls is not scored by this metric rather than scored 0 or 1.
    """
    if not matches:
        raise ValueError("no expected calls: tool-call accuracy is undefined")
    matched = sum(1 for match in matches if (match.matched if isinstance(match, CallMatch) else bool(match)))
    return matched / len(matches)


__all__ = [
    "UNSET",
    "ActualCall",
    "CallMatch",
    "ExpectedCall",
    "ExpectedOutput",
    "ExpectedParameter",
    "as_actual_call",
    "as_expected_call",
    "json_equal",
    "match_expected_calls",
    "tool_call_accuracy",
]
