"""The OTel GenAI `gen_ai.evaluation.result` event of one metric result.

The same attributes go out as a span event on the scored span and as a log record
correlated with it (trace and span id): the conventions now define the event as a log
record, and span events are being deprecated, but many trace backends read only spans.

Every event carries who scored it and by which definition (`eval.evaluator`,
`eval.revision`, as the score metrics do): the conventions have no merged attribute for
an evaluator yet, and without one, two results of one metric could not be told apart.
"""

from __future__ import annotations

from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.span_finding import SpanFinding

EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATOR = "eval.evaluator"
REVISION = "eval.revision"


def evaluation_attributes(result: MetricResult, source: Provenance = CODE_PROVENANCE) -> dict[str, str | float]:
    attributes: dict[str, str | float] = {
        EVALUATION_NAME: result.name,
        EVALUATOR: source.evaluator,
        REVISION: source.revision,
    }
    if result.score is not None:
        attributes["gen_ai.evaluation.score.value"] = result.score
    if result.label is not None:  # a result has a label exactly when it has a score
        attributes["gen_ai.evaluation.score.label"] = result.label
    explanation = result.explanation if result.error is None else result.error
    if explanation:
        attributes["gen_ai.evaluation.explanation"] = explanation
    if result.error is not None:
        attributes["error.type"] = result.error_type or "error"
    return attributes


def finding_attributes(
    finding: SpanFinding, source: Provenance = CODE_PROVENANCE
) -> dict[str, str | int | float | bool]:
    """The event of a finding about one span: its metric's provenance after its name."""
    own = finding.event_attributes()
    return {EVALUATION_NAME: own.pop(EVALUATION_NAME), EVALUATOR: source.evaluator, REVISION: source.revision, **own}
