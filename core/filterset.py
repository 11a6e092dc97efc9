"""The OpenTelemetry Collector's filterset shape, for choosing traces and spans in config.

`match_type: strict|regexp`, `services` (the resource's `service.name`), `span_names`,
`attributes: [{key, value}]`: within one filterset every property given must match, any
entry of `services` or `span_names` may match, and every entry of `attributes` must
match on the span or its resource. Used by `score.include`/`exclude` (on a trace's root
span) and by a metric's span target (`where:`, on each span it may score).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from spanscore.core.attributes import find_attribute
from spanscore.core.component import ComponentConfig
from spanscore.core.json_values import json_equal


class AttributeMatch(ComponentConfig):
    key: str = Field(min_length=1)
    # Without a value the key being present is enough, as in the Collector.
    value: Any = None


class MatchProperties(ComponentConfig):
    match_type: Literal["strict", "regexp"] = "strict"
    services: list[str] = Field(default_factory=list)  # the resource's service.name
    span_names: list[str] = Field(default_factory=list)  # the span's name (a trace's: its root's)
    attributes: list[AttributeMatch] = Field(default_factory=list)  # on the span or its resource

    @model_validator(mode="after")
    def _usable(self) -> MatchProperties:
        if not (self.services or self.span_names or self.attributes):
            raise ValueError("give at least one of services, span_names, attributes")
        if self.match_type == "regexp":
            problems = []
            for field in ("services", "span_names"):
                for i, pattern in enumerate(getattr(self, field)):
                    problems.extend(_regex_problems(pattern, (field, i)))
            for i, attribute in enumerate(self.attributes):
                if attribute.value is not None:
                    problems.extend(_regex_problems(attribute.value, ("attributes", i, "value")))
            if problems:
                raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self


class Filterset:
    """One `MatchProperties`, compiled."""

    def __init__(self, properties: MatchProperties):
        regexp = properties.match_type == "regexp"
        self._text = _searcher if regexp else _equal
        # Strict values compare with their type, as the Collector's strict match: true is not 1.
        self._value = _value_searcher if regexp else json_equal
        self._services = [_compiled(s, regexp) for s in properties.services]
        self._span_names = [_compiled(s, regexp) for s in properties.span_names]
        self._attributes = [
            (a.key, None if a.value is None else _compiled(a.value, regexp)) for a in properties.attributes
        ]

    def matches(self, service: Any, span_name: str | None, sources: Sequence[Iterable[KeyValue]]) -> bool:
        """Whether a span named `span_name` (None: no span), of the service `service` (the
        resource's `service.name`), matches: its `attributes` looked up in `sources` (the
        span's attributes, its resource's)."""
        if self._services:
            if not isinstance(service, str) or not any(self._text(p, service) for p in self._services):
                return False
        if self._span_names and (span_name is None or not any(self._text(p, span_name) for p in self._span_names)):
            return False
        for key, expected in self._attributes:
            if not any(self._found(attributes, key, expected) for attributes in sources):
                return False
        return True

    @property
    def reads_attributes(self) -> bool:
        return bool(self._attributes)

    def _found(self, attributes: Iterable[KeyValue], key: str, expected: Any) -> bool:
        value = find_attribute(attributes, key)
        return value is not None and (expected is None or self._value(expected, value))


def _compiled(value: Any, regexp: bool) -> Any:
    return re.compile(value) if regexp else value


def _equal(expected: str, actual: str) -> bool:
    return expected == actual


def _searcher(pattern: re.Pattern[str], actual: str) -> bool:
    # Unanchored, as Go's regexp.MatchString in the Collector: anchor with ^...$.
    return pattern.search(actual) is not None


def _value_searcher(pattern: re.Pattern[str], actual: Any) -> bool:
    return isinstance(actual, str) and pattern.search(actual) is not None


def _regex_problems(pattern: Any, loc: tuple[str | int, ...]) -> list[InitErrorDetails]:
    if not isinstance(pattern, str):
        message = "must be a string (a regular expression) with match_type regexp"
    else:
        try:
            re.compile(pattern)
            return []
        except re.error as exc:
            message = f"invalid regular expression: {exc}"
    return [
        InitErrorDetails(type=PydanticCustomError("regexp", "{message}", {"message": message}), loc=loc, input=pattern)
    ]
