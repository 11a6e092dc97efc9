"""What an evaluator spent on one trace: requests and tokens.

Processors that call a model (an LLM judge, a paid embedding API) return one alongside
their metric results; the pipeline writes it on the trace's anchor span as
`eval.<evaluator>.calls`, `.input_tokens` and `.output_tokens` and adds it to the score
metrics' `gen_ai.evaluation.<evaluator>.calls` and `.tokens` counters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_EVALUATOR_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class EvaluatorUsage:
    evaluator: str  # a lowercase identifier, part of attribute and metric names: "judge"
    calls: int  # requests sent, retries and failed requests included
    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        if not _EVALUATOR_NAME.match(self.evaluator):
            raise ValueError(f"evaluator must be a lowercase identifier, got {self.evaluator!r}")
        if min(self.calls, self.input_tokens, self.output_tokens) < 0:
            raise ValueError(f"usage counts cannot be negative: {self}")


def per_evaluator(usages: Iterable[EvaluatorUsage]) -> list[EvaluatorUsage]:
    """One usage per evaluator, summed: two processors may pay the same judge on one trace."""
    totals: dict[str, EvaluatorUsage] = {}
    for usage in usages:
        seen = totals.get(usage.evaluator)
        totals[usage.evaluator] = (
            usage
            if seen is None
            else EvaluatorUsage(
                usage.evaluator,
                seen.calls + usage.calls,
                seen.input_tokens + usage.input_tokens,
                seen.output_tokens + usage.output_tokens,
            )
        )
    return list(totals.values())
