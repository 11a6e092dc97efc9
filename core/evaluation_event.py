"""The OTel GenAI `gen_ai.evaluation.result` event of one metric result.

The same attributes go out as a span event on the scored span and as a log record
correlated with it (trace and span id): the conventions now define the event as a log
record, and span events are being deprecated, but many trace backends read only spans.

Every event carries who scored it and by which definition (`eval.evaluator`,
`eval.revision`, as the score metrics do): the conventions have no merged attribute for
an evaluator yet, and without one, two results of one metric could not be told apart.

Built here (`evaluation_attributes`, `finding_attributes`) and read back here
(`evaluation_events`), beside the span attributes of core.score_encoding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.attributes import any_value_to_python
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import EVALUATOR, REVISION
from spanscore.core.span_finding import SpanFinding

EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
SCORE_VALUE = "gen_ai.evaluation.score.value"
SCORE_LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
ERROR_TYPE = "error.type"


def evaluation_attributes(result: MetricResult, source: Provenance = CODE_PROVENANCE) -> dict[str, str | float]:
    attributes: dict[str, str | float] = {
        EVALUATION_NAME: result.name,
        EVALUATOR: source.evaluator,
        REVISION: source.revision,
    }
    if result.score is not None:
        attributes[SCORE_VALUE] = result.score
    if result.label is not None:  # a result has a label exactly when it has a score
        attributes[SCORE_LABEL] = result.label
    explanation = result.explanation if result.error is None else result.error
    if explanation:
        attributes[EXPLANATION] = explanation
    if result.error is not None:
        attributes[ERROR_TYPE] = result.error_type or "error"
    return attributes


def finding_attributes(
    finding: SpanFinding, source: Provenance = CODE_PROVENANCE
) -> dict[str, str | int | float | bool]:
    """The event of a finding about one span: its metric's name and provenance, its label
    and explanation, then the finding's own attributes."""
    return {
        EVALUATION_NAME: finding.name,
        EVALUATOR: source.evaluator,
        REVISION: source.revision,
        SCORE_LABEL: finding.label,
        EXPLANATION: finding.explanation,
        **dict(finding.attributes),
    }


@dataclass(frozen=True)
class EvaluationEvent:
    """A `gen_ai.evaluation.result` event read back from a span: its attributes by key."""

    attributes: Mapping[str, Any]

    @property
    def name(self) -> Any:
        """`gen_ai.evaluation.name`: the metric the event is a result or a finding of."""
        return self.attributes.get(EVALUATION_NAME)

    def get(self, key: str) -> Any:
        return self.attributes.get(key)


def evaluation_events(span: Span) -> Iterator[EvaluationEvent]:
    """The span's `gen_ai.evaluation.result` events, in its order."""
    for event in span.events:
        if event.name == EVALUATION_EVENT:
            yield EvaluationEvent({kv.key: any_value_to_python(kv.value) for kv in event.attributes})
