"""Answers for a loopback judge: a valid JSON answer generated from the request's schema.

Every number gets `score` (clamped into its bounds), every enum its first value, every
string `text`, every array max(minItems, 1) items: enough to drive every judge metric
end to end with scores known in advance.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.openai_server import RecordedRequest, Reply


def answer_for(schema: dict[str, Any], score: float = 0.8, text: str = "looked fine") -> Any:
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {name: answer_for(sub, score, text) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        count = max(schema.get("minItems", 1), 1)
        return [answer_for(schema.get("items", {"type": "string"}), score, text) for _ in range(count)]
    if kind in ("number", "integer"):
        low, high = schema.get("minimum", float("-inf")), schema.get("maximum", float("inf"))
        value = min(max(score, low), high)
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return True
    return text


def schema_of(request: RecordedRequest) -> tuple[str, dict[str, Any]]:
    """The schema name and schema a json_schema-mode request asks for."""
    json_schema = request.body["response_format"]["json_schema"]
    return json_schema["name"], json_schema["schema"]


def schema_judge(score: float = 0.8, overrides: dict[str, Any] | None = None, fixed_usage: bool = True):
    """A server handler answering every judge request from its schema; `overrides` maps a
    schema name to a fixed answer (dict) or raw content (str). Usage is 120 prompt + 30
    completion tokens per reply, or with `fixed_usage=False` estimated from the text."""

    def handler(request: RecordedRequest) -> Reply:
        name, schema = schema_of(request)
        override = (overrides or {}).get(name)
        if isinstance(override, str):
            content = override
        else:
            content = json.dumps(override if override is not None else answer_for(schema, score))
        if not fixed_usage:
            return Reply(content=content)
        return Reply(content=content, prompt_tokens=120, completion_tokens=30)

    return handler
