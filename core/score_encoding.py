"""The names every reader of spanscore's scores relies on, in one place.

Scores go on spans as `eval.<metric>.*` attributes and `gen_ai.evaluation.result` events
(`core.evaluation_event`); a session's results go on a carrier span of its own, named
`evaluate_session`, in the `spanscore` instrumentation scope. The pipeline writes them,
exporters (Phoenix) and the scoring scope recognise them.
"""

from __future__ import annotations

from spanscore.core.trace import Trace

SESSION_SPAN_NAME = "evaluate_session"
SCOPE_NAME = "spanscore"


def is_session_carrier(trace: Trace) -> bool:
    """Whether `trace` is a session carrier spanscore wrote (a root `evaluate_session`
    span in the `spanscore` scope): a report of scores, not an agent's work."""
    root, origin = trace.root, trace.root_origin
    return (
        root is not None
        and origin is not None
        and root.name == SESSION_SPAN_NAME
        and origin.scope_spans.scope.name == SCOPE_NAME
    )


# failure_localization's findings ("Findings on other spans" in docs/score-encoding.md):
# the root lists the spans it blamed, in order, comma-separated; each blamed span has a
# `gen_ai.evaluation.result` event with these keys beside the evaluation's own.
BLAMED_SPAN_IDS = "eval.failure_localization.span_ids"
FAILURE_CATEGORY = "eval.failure.category"
FAILURE_GROUP = "eval.failure.group"
FAILURE_IMPACT = "eval.failure.impact"
FAILURE_EVIDENCE = "eval.failure.evidence"
FAILURE_SOURCE = "eval.failure.source"
