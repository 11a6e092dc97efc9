"""The OTel GenAI `gen_ai.evaluation.result` event of one metric result.

The same attributes go out as a span event on the scored span and as a log record
correlated with it (trace and span id): the conventions now define the event as a log
record, and span events are being deprecated, but many trace backends read only spans.
"""

from __future__ import annotations

from spanscore.core.result import MetricResult

EVALUATION_EVENT = "gen_ai.evaluation.result"


def evaluation_attributes(result: MetricResult) -> dict[str, str | float]:
    attributes: dict[str, str | float] = {"gen_ai.evaluation.name": result.name}
    if result.score is not None:
        attributes["gen_ai.evaluation.score.value"] = result.score
        attributes["gen_ai.evaluation.score.label"] = result.label
    explanation = result.explanation if result.error is None else result.error
    if explanation:
        attributes["gen_ai.evaluation.explanation"] = explanation
    if result.error is not None:
        attributes["error.type"] = result.error_type or "error"
    return attributes
