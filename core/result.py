"""The outcome of one metric on one trace or session."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

DEFAULT_THRESHOLD = 0.5


class MetricResult(BaseModel):
    """A score in [0, 1] with its verdict, or an error saying why there is no score.

    `passed` follows the metric's threshold: a result passes when score >= threshold.
    """

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    score: float | None = None
    threshold: float = DEFAULT_THRESHOLD
    explanation: str | None = None
    error: str | None = None
    error_type: str | None = None
    # A metric that classifies (failure_localization: the first error's category) labels
    # its result with the class; every other result's label is pass or fail.
    class_label: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    span_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")  # the span it is about; None: the trace or session

    @field_validator("score")
    @classmethod
    def _in_unit_interval(cls, value: float | None) -> float | None:
        if value is None:
            return None
        if math.isnan(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"score must be within [0, 1], got {value}")
        return float(value)

    @computed_field
    @property
    def passed(self) -> bool | None:
        return None if self.score is None else self.score >= self.threshold

    @computed_field
    @property
    def label(self) -> str | None:
        passed = self.passed
        if passed is None:
            return None
        return self.class_label or ("pass" if passed else "fail")

    @classmethod
    def failure(cls, name: str, error: BaseException | str, threshold: float = DEFAULT_THRESHOLD) -> MetricResult:
        """A result recording that the metric could not be computed."""
        if isinstance(error, BaseException):
            return cls(
                name=name,
                threshold=threshold,
                error=str(error) or type(error).__name__,
                error_type=type(error).__name__,
            )
        return cls(name=name, threshold=threshold, error=error, error_type="error")
