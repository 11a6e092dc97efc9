"""What an evaluator spent on one trace: requests and tokens.

Processors that call a model (an LLM judge, a paid embedding API) return one alongside
their metric results; the pipeline writes it on the trace's anchor span as
`eval.<evaluator>.calls`, `.input_tokens` and `.output_tokens` and adds it to the score
metrics' `gen_ai.evaluation.<evaluator>.calls` and `.tokens` counters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvaluatorUsage:
    evaluator: str  # a lowercase identifier: "judge"
    calls: int  # requests sent, retries and failed requests included
    input_tokens: int = 0
    output_tokens: int = 0
