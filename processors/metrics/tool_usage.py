"""fair-forge's four-aspect tool correctness: selection, parameters, sequence, utilization.

The first three aspects compare the tool calls an interaction made with the ones its
ground truth expects; they are deterministic and live here. The fourth, utilization
(does the final answer use the tool results?), is a flag in fair-forge; in spanscore the
judge's verdict on the answer, else the values of the results found in the answer (the
ground_truth processor decides which), so it arrives here as a number.
overall = Σ weight × aspect.

A call is `(name, parameters)` or `(name, parameters, step)`: `parameters` a mapping
of argument name to JSON value, `step` its 1-based position among the trace's tool
calls. Without a step, a call's step is its 1-based position in the list it is given
in: the used calls in the order the trace made them, the expected calls in the order
the case expects them. Names are compared exactly, as fair-forge does.

Values are compared with `json_equal` (type-sensitive: "5" != 5, True != 1, while
1 == 1.0 since JSON has one number type), not Python's `==`.

Where spanscore departs from fair-forge's code (listed in docs/eval-suites.md too):

- parameters and sequence score every expected call; fair-forge adds a single 0 per
  expected tool name that was never used, however many calls of it are expected;
- a key present in only one of two parameter dicts counts as unequal; fair-forge's
  `dict.get` reads a missing key as None, so a missing key "equals" an explicit null;
- in sequence, the i-th expected call of a tool used fewer than i times scores 0;
  fair-forge compares the expected step with None, which scores 1 when the expected
  call carries no step either.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from numbers import Real
from typing import Any

from spanscore.processors.metrics.expected_calls import json_equal

TOOL_ASPECTS = ("selection", "parameters", "sequence", "utilization")
# fair-forge's default `tool_weights`, in `TOOL_ASPECTS` order.
DEFAULT_TOOL_WEIGHTS: tuple[float, float, float, float] = (0.25, 0.25, 0.25, 0.25)

Call = Sequence[Any]  # (name, parameters) or (name, parameters, step)


def _calls(calls: Iterable[Call], what: str) -> list[tuple[str, Mapping[str, Any], int]]:
    """The calls as (name, parameters, step) triples, steps defaulting to 1-based positions."""
    normalized = []
    for position, call in enumerate(calls, start=1):
        if isinstance(call, str) or not isinstance(call, Sequence) or len(call) not in (2, 3):
            raise ValueError(
                f"{what}[{position - 1}] must be (name, parameters) or (name, parameters, step), got {call!r}"
            )
        name, parameters = call[0], call[1]
        step = call[2] if len(call) == 3 else position
        if not isinstance(name, str):
            raise ValueError(f"{what}[{position - 1}]: name must be a string, got {name!r}")
        if not isinstance(parameters, Mapping):
            raise ValueError(f"{what}[{position - 1}]: parameters must be a mapping, got {parameters!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(f"{what}[{position - 1}]: step must be an int >= 1, got {step!r}")
        normalized.append((name, parameters, step))
    return normalized


def _by_name(calls: list[tuple[str, Mapping[str, Any], int]]) -> dict[str, list[tuple[str, Mapping[str, Any], int]]]:
    grouped: dict[str, list[tuple[str, Mapping[str, Any], int]]] = defaultdict(list)
    for call in calls:
        grouped[call[0]].append(call)
    return grouped


def tool_selection(used_names: Iterable[str], expected_names: Iterable[str]) -> float:
    """Did the interaction use the expected tools? U = names used, E = names expected, as sets.

    U == E → 1; U ⊂ E (tools missing) → |U|/|E|; E ⊂ U (extra tools) → |E|/|U|;
    otherwise the Jaccard index |U ∩ E| / |U ∪ E|. Hence E empty and U not → 0, and U
    empty and E not → 0. Both empty is U == E → 1.0: nothing was expected and nothing
    was used, which is the correct selection (fair-forge gives 1.0 as well).
    """
    used, expected = set(used_names), set(expected_names)
    if used == expected:
        return 1.0
    if used < expected:
        return len(used) / len(expected)
    if expected < used:
        return len(expected) / len(used)
    return len(used & expected) / len(used | expected)


def _parameter_match(expected: Mapping[str, Any], used: Mapping[str, Any]) -> float:
    """1 when the dicts are equal, else the share of keys in their union with equal values."""
    if json_equal(dict(expected), dict(used)):
        return 1.0
    keys = set(expected) | set(used)
    equal = sum(1 for key in keys if key in expected and key in used and json_equal(expected[key], used[key]))
    return equal / len(keys)


def tool_parameters(used_calls: Iterable[Call], expected_calls: Iterable[Call]) -> float:
    """Were the tools called with the expected arguments? Mean over expected calls.

    Per expected call: 0 when its tool was never used; otherwise its parameters against
    those of the FIRST used call of that tool (fair-forge compares every expected call
    of a name with that one call): equal dicts → 1, else the share of keys in the union
    of both dicts whose values are equal (a key missing on one side is unequal). No
    expected calls → 0.

    >>> tool_parameters([("weather", {"city": "Oslo", "unit": "C"})], [("weather", {"city": "Oslo", "days": 3})])
    0.3333333333333333
    """
    used = _by_name(_calls(used_calls, "used_calls"))
    expected = _calls(expected_calls, "expected_calls")
    if not expected:
        return 0.0
    scores = [
        _parameter_match(parameters, used[name][0][1]) if name in used else 0.0 for name, parameters, _ in expected
    ]
    return sum(scores) / len(scores)


def tool_sequence(used_calls: Iterable[Call], expected_calls: Iterable[Call], order_matters: bool = True) -> float:
    """Were the tools called at the expected steps? Mean over expected calls.

    1 when order does not matter (`tool_sequence_matters: false`). Otherwise, per
    expected call: the i-th expected call of a tool scores 1 when its step equals the
    step of the i-th used call of that tool, else 0 (also when the tool was used fewer
    than i times). No expected calls → 0.

    >>> used = [("search", {}), ("search", {}), ("fetch", {})]        # steps 1, 2, 3
    >>> expected = [("search", {}), ("fetch", {}), ("search", {})]    # steps 1, 2, 3
    >>> tool_sequence(used, expected)  # search#1 at 1 = 1; fetch#1 at 2 != 3; search#2 at 3 != 2
    0.3333333333333333
    """
    used = _by_name(_calls(used_calls, "used_calls"))
    expected = _calls(expected_calls, "expected_calls")
    if not order_matters:
        return 1.0
    if not expected:
        return 0.0
    seen: dict[str, int] = defaultdict(int)
    scores = []
    for name, _, step in expected:
        occurrence = seen[name]
        seen[name] += 1
        same_step = occurrence < len(used.get(name, ())) and used[name][occurrence][2] == step
        scores.append(1.0 if same_step else 0.0)
    return sum(scores) / len(scores)


def _check_unit(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {value!r}")
    return float(value)


def tool_usage_overall(
    selection: float,
    parameters: float,
    sequence: float,
    utilization: float,
    weights: Sequence[float] = DEFAULT_TOOL_WEIGHTS,
) -> float:
    """Σ weight × aspect over selection, parameters, sequence and utilization.

    `weights` are in that order (`TOOL_ASPECTS`), default 0.25 each. They are not
    renormalized, as in fair-forge: weights summing to less than 1 cap the overall below
    1, and weights summing to more can take it above 1. Aspects must be within [0, 1]
    and weights finite and non-negative, else ValueError.
    """
    if isinstance(weights, (str, Mapping)) or not isinstance(weights, Sequence) or len(weights) != len(TOOL_ASPECTS):
        raise ValueError(f"weights must be {len(TOOL_ASPECTS)} numbers ({', '.join(TOOL_ASPECTS)}), got {weights!r}")
    aspects = [
        _check_unit(value, name) for name, value in zip(TOOL_ASPECTS, (selection, parameters, sequence, utilization))
    ]
    total = 0.0
    for name, weight, aspect in zip(TOOL_ASPECTS, weights, aspects):
        if isinstance(weight, bool) or not isinstance(weight, Real) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f"weight of {name!r} must be a finite non-negative number, got {weight!r}")
        total += weight * aspect
    return total


__all__ = [
    "DEFAULT_TOOL_WEIGHTS",
    "TOOL_ASPECTS",
    "tool_parameters",
    "tool_selection",
    "tool_sequence",
    "tool_usage_overall",
]
