"""From a judge model's reply text to a validated answer, or `MalformedAnswer`.

A judge's answer is untrusted model output: it may be wrapped in prose or a ```json
fence, cut off by `max_tokens`, carry a number outside the scale it was asked for, or
miss a field. `parse_answer` finds the JSON object in the text and `validate` checks it
against the request's JSON schema, returning a cleaned copy.

The validator covers the subset of JSON Schema that judge answers use: `type` (one or a
list), `properties`, `required`, `additionalProperties`, `enum`, `const`, `minimum`,
`maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `items`, `minItems`, `maxItems`,
`minLength`, `maxLength`. Other keywords are ignored. Departures from plain validation,
all on purpose:

- a number within `CLAMP_TOLERANCE` outside `[minimum, maximum]` is clamped to the bound
  (1.0000001 for a 0..1 score is float noise, not a wrong answer); further out, it is
  malformed;
- NaN and infinities are malformed wherever a number is expected;
- an integer written as `3.0` is accepted as `3`; booleans are never numbers;
- keys an object's schema forbids (`additionalProperties: false`) are dropped rather
  than rejected, so that an extra "reasoning" key from a chatty model costs nothing and
  still never reaches the caller.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeGuard

CLAMP_TOLERANCE = 1e-6
MAX_CANDIDATES = 64  # `{` positions tried before giving up on a long, JSON-free text

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "null": (type(None),),
}


class MalformedAnswer(ValueError):
    """The reply holds no JSON object that satisfies the schema; the message says where."""


def parse_answer(text: str | None, schema: dict[str, Any]) -> dict[str, Any]:
    """The validated JSON object in a reply's text."""
    return validate(extract_json(text), schema)


def extract_json(text: str | None) -> dict[str, Any]:
    """The JSON object a reply holds: the whole text, else the first ```json (or bare ```)
    fence holding an object, else the first balanced `{...}` that parses."""
    if text is None or not text.strip():
        raise MalformedAnswer("the reply is empty")
    # Reasoning models may think aloud, braces included, before answering.
    text = _THINKING.sub("", text).strip()
    whole = _loads_object(text)
    if whole is not None:
        return whole
    fences = sorted(_FENCE.finditer(text), key=lambda m: m.group(1).lower() != "json")
    for fence in fences:
        found = _loads_object(fence.group(2).strip()) or _first_balanced_object(fence.group(2))
        if found is not None:
            return found
    found = _first_balanced_object(text)
    if found is None:
        raise MalformedAnswer(f"no JSON object in the reply: {_preview(text)}")
    return found


def _loads_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _first_balanced_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    tried = 0
    while start != -1 and tried < MAX_CANDIDATES:
        tried += 1
        end = _balanced_end(text, start)
        if end is None:
            return None  # an unclosed brace here leaves none closed further on
        value = _loads_object(text[start:end])
        if value is not None:
            return value
        start = text.find("{", start + 1)
    return None


def _balanced_end(text: str, start: int) -> int | None:
    """The index just past the `}` closing the `{` at `start`, skipping braces in strings."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _preview(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- validation ------------------------------------------------------------------------
def validate(value: Any, schema: dict[str, Any], path: str = "$") -> Any:
    """A cleaned copy of `value` satisfying `schema` (see the module docstring)."""
    if "const" in schema and value != schema["const"]:
        raise MalformedAnswer(f"{path}: expected {schema['const']!r}, got {_short(value)}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        raise MalformedAnswer(f"{path}: {_short(value)} is not one of {schema['enum']!r}")
    kind = _matching_type(value, schema.get("type"), path)
    if kind in ("number", "integer") or (kind is None and _is_number(value)):
        return _number(value, schema, kind or "number", path)
    if kind == "string" or isinstance(value, str):
        _check_length(len(value), schema, "minLength", "maxLength", "characters", path)
        return value
    if isinstance(value, dict):
        return _object(value, schema, path)
    if isinstance(value, list):
        _check_length(len(value), schema, "minItems", "maxItems", "items", path)
        items = schema.get("items")
        if isinstance(items, dict):
            return [validate(item, items, f"{path}[{i}]") for i, item in enumerate(value)]
        return list(value)
    return value


def _matching_type(value: Any, declared: Any, path: str) -> str | None:
    """The declared type `value` matches (None when the schema declares none)."""
    if declared is None:
        return None
    kinds = [declared] if isinstance(declared, str) else list(declared)
    for kind in kinds:
        if kind in ("number", "integer"):
            if _is_number(value) and (kind == "number" or _is_integral(value)):
                return kind
        elif isinstance(value, _TYPES.get(kind, ())):
            return kind
    raise MalformedAnswer(f"{path}: expected {' or '.join(kinds)}, got {_type_name(value)} {_short(value)}")


def _number(value: float | int, schema: dict[str, Any], kind: str, path: str) -> float | int:
    if not math.isfinite(value):
        raise MalformedAnswer(f"{path}: {value!r} is not a finite number")
    if kind == "integer":
        value = int(value)
    low, high = schema.get("minimum"), schema.get("maximum")
    if _is_number(low) and value < low:
        if value < low - CLAMP_TOLERANCE:
            raise MalformedAnswer(f"{path}: {value!r} is below the minimum {low!r}")
        value = low
    if _is_number(high) and value > high:
        if value > high + CLAMP_TOLERANCE:
            raise MalformedAnswer(f"{path}: {value!r} is above the maximum {high!r}")
        value = high
    exclusive_low, exclusive_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if _is_number(exclusive_low) and value <= exclusive_low:
        raise MalformedAnswer(f"{path}: {value!r} is not above {exclusive_low!r}")
    if _is_number(exclusive_high) and value >= exclusive_high:
        raise MalformedAnswer(f"{path}: {value!r} is not below {exclusive_high!r}")
    return value


def _object(value: dict[str, Any], schema: dict[str, Any], path: str) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    missing = [key for key in schema.get("required") or () if key not in value]
    if missing:
        raise MalformedAnswer(f"{path}: missing required {', '.join(map(repr, missing))}")
    extra = schema.get("additionalProperties", True)
    cleaned: dict[str, Any] = {}
    for key, item in value.items():
        if key in properties:
            cleaned[key] = validate(item, properties[key], f"{path}.{key}")
        elif isinstance(extra, dict):
            cleaned[key] = validate(item, extra, f"{path}.{key}")
        elif extra is not False:
            cleaned[key] = item
    return cleaned


def _check_length(size: int, schema: dict[str, Any], low_key: str, high_key: str, unit: str, path: str) -> None:
    low, high = schema.get(low_key), schema.get(high_key)
    if isinstance(low, int) and size < low:
        raise MalformedAnswer(f"{path}: {size} {unit}, fewer than {low}")
    if isinstance(high, int) and size > high:
        raise MalformedAnswer(f"{path}: {size} {unit}, more than {high}")


def _is_number(value: Any) -> TypeGuard[float | int]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integral(value: Any) -> bool:
    return isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())


def _same(value: Any, option: Any) -> bool:
    # JSON's true is not 1, though Python's True == 1.
    return value == option and isinstance(value, bool) == isinstance(option, bool)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "..."


__all__ = ["CLAMP_TOLERANCE", "MalformedAnswer", "extract_json", "parse_answer", "validate"]
