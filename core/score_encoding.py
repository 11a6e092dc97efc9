"""The score encoding in one place: every `eval.*` attribute key, built and read back here.

docs/score-encoding.md is the contract. A metric's result goes on the span it is about,
which may be any span of a trace (its root, a session's `evaluate_session` carrier, a
model call or a tool span a span-level result names, whose metric the root rolls up),
as `eval.<metric>.<field>` attributes: `ResultKeys` names
them, `result_attributes` builds them from a `MetricResult` and `read_results` turns a
span's attributes back into an `EncodedResult` per metric. A processor's context beside
a result (a threshold, trial scores, a roll-up over spans) is one more field of the
metric's keys. Evaluator usage is `eval.<evaluator>.*` (`UsageKeys`). Each result also
has a `gen_ai.evaluation.result` event (core.evaluation_event), whose provenance keys
are `EVALUATOR` and `REVISION`, as on the score metrics. A session's results go on a
carrier span of its own, named `evaluate_session`, in the `spanscore` instrumentation
scope.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from spanscore.core.attributes import any_value_to_python

if TYPE_CHECKING:
    from spanscore.core.provenance import Provenance
    from spanscore.core.result import MetricResult
    from spanscore.core.trace import Trace
    from spanscore.core.usage import EvaluatorUsage

PREFIX = "eval."  # every key spanscore writes on a span, so none overwrites the agent's own

SESSION_SPAN_NAME = "evaluate_session"
# A trace scored again (late spans): the new results on a span of this name in the
# trace, linked to (and a child of) its root, as no span id is sent twice.
TRACE_SPAN_NAME = "evaluate_trace"
SCOPE_NAME = "spanscore"

# Provenance on each evaluation event and score metric: who scored, by which definition.
EVALUATOR = "eval.evaluator"
REVISION = "eval.revision"

# The score metrics' label of a span-level result: the kind of span it is on (llm, tool,
# retrieval, agent; `span` for another). Trace and session results have none.
SPAN_KIND = "eval.span.kind"
CASE_ID = "eval.case.id"  # the eval-suite case an attempt was graded against
ROUTE = "eval.route"  # on a trace a score_router kept: the routes it matched, comma-separated
SESSION_TRACE_COUNT = "eval.session.trace_count"  # on a session carrier
# On a session carrier's link to the carrier of the session's previous close (late traces).
PREVIOUS_CARRIER_LINK = "eval.session.previous_carrier"

# failure_localization's findings ("Findings on other spans" in docs/score-encoding.md):
# the root lists the spans it blamed, in order, comma-separated; each blamed span has a
# `gen_ai.evaluation.result` event with these keys beside the evaluation's own.
BLAMED_SPAN_IDS = "eval.failure_localization.span_ids"
FAILURE_CATEGORY = "eval.failure.category"
FAILURE_GROUP = "eval.failure.group"
FAILURE_IMPACT = "eval.failure.impact"
FAILURE_EVIDENCE = "eval.failure.evidence"
FAILURE_SOURCE = "eval.failure.source"
# A finding's details beyond its category, by their own name (as annotation metadata).
FAILURE_DETAILS = {
    "group": FAILURE_GROUP,
    "impact": FAILURE_IMPACT,
    "evidence": FAILURE_EVIDENCE,
    "source": FAILURE_SOURCE,
}

# The fields every result writes (in this order, those it has): the rest of a metric's
# keys are context a processor adds beside them.
RESULT_FIELDS = ("evaluator", "revision", "score", "label", "explanation", "error")
_RESULT_SUFFIXES = tuple("." + field for field in RESULT_FIELDS)


class ResultKeys:
    """The attribute keys of one metric's result, on whatever span it is written."""

    __slots__ = (
        "metric",
        "prefix",
        "evaluator",
        "revision",
        "score",
        "label",
        "explanation",
        "error",
        "skipped",
        "pending",
        "sequence",
        "threshold",
        "trial_scores",
        "category",
        "raw_score",
        "scale",
        "spans",
        "min",
        "mean",
        "failing",
        "errors",
    )

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self.prefix = f"{PREFIX}{metric}."
        self.evaluator = self.prefix + "evaluator"  # who scored it
        self.revision = self.prefix + "revision"  # by which definition
        self.score = self.prefix + "score"
        self.label = self.prefix + "label"  # pass or fail, with the score
        self.explanation = self.prefix + "explanation"
        self.error = self.prefix + "error"  # could not be computed: no score
        self.skipped = self.prefix + "skipped"  # not graded, and why: no result at all
        # Not computed when the trace left (max_hold), and why: its result follows on a carrier.
        self.pending = self.prefix + "pending"
        # 1 for the trace's first scoring, 2.. for each re-score: the highest is the latest.
        self.sequence = self.prefix + "sequence"
        self.threshold = self.prefix + "threshold"  # the judge metrics' cut between pass and fail
        self.trial_scores = self.prefix + "trial_scores"  # the judge's trials, comma-separated
        # A judge metric of your own's answer before it became a score: the category it
        # chose, or its value on the metric's scale (`1-5`), which people label in.
        self.category = self.prefix + "category"
        self.raw_score = self.prefix + "raw_score"
        self.scale = self.prefix + "scale"
        # A span-level metric's roll-up on the root (core.span_rollup): its spans' results
        # counted, their lowest and mean scores, how many failed and how many had an error.
        self.spans = self.prefix + "spans"
        self.min = self.prefix + "min"
        self.mean = self.prefix + "mean"
        self.failing = self.prefix + "failing"
        self.errors = self.prefix + "errors"

    def field(self, name: str) -> str:
        """The key of a field of the metric's own, such as failure_localization's `errors`."""
        return self.prefix + name


@lru_cache(maxsize=1024)
def result_keys(metric: str) -> ResultKeys:
    return ResultKeys(metric)


class UsageKeys:
    """The keys of what an evaluator (`judge`, say) was paid for on a span."""

    __slots__ = ("evaluator", "prefix", "calls", "input_tokens", "output_tokens", "input_share")

    def __init__(self, evaluator: str) -> None:
        self.evaluator = evaluator
        self.prefix = f"{PREFIX}{evaluator}."
        self.calls = self.prefix + "calls"
        self.input_tokens = self.prefix + "input_tokens"
        self.output_tokens = self.prefix + "output_tokens"
        self.input_share = self.prefix + "input_share"  # the share of the trace's text the calls carried


@lru_cache(maxsize=64)
def usage_keys(evaluator: str) -> UsageKeys:
    return UsageKeys(evaluator)


def result_attributes(result: MetricResult, source: Provenance) -> list[tuple[str, str | float]]:
    """The attributes of `result`, scored by `source`, in the order they are written."""
    keys = result_keys(result.name)
    pairs: list[tuple[str, str | float]] = [(keys.evaluator, source.evaluator), (keys.revision, source.revision)]
    label = result.label  # there is one exactly when there is a score
    if result.score is not None and label is not None:
        pairs.append((keys.score, float(result.score)))
        pairs.append((keys.label, label))
    if result.explanation:
        pairs.append((keys.explanation, result.explanation))
    if result.error is not None:
        pairs.append((keys.error, result.error))
    return pairs


def usage_attributes(usage: EvaluatorUsage) -> list[tuple[str, int]]:
    keys = usage_keys(usage.evaluator)
    return [
        (keys.calls, int(usage.calls)),
        (keys.input_tokens, int(usage.input_tokens)),
        (keys.output_tokens, int(usage.output_tokens)),
    ]


def parse_key(key: str) -> tuple[str, str] | None:
    """`(metric, field)` of an `eval.<metric>.<field>` key; None for a key without a field
    or not under `eval.`. Metric names have no dots: all after the metric's is the field."""
    if not key.startswith(PREFIX):
        return None
    end = key.find(".", len(PREFIX))
    return (key[len(PREFIX) : end], key[end + 1 :]) if end > len(PREFIX) else None


def metric_of(key: str) -> str:
    """`<metric>` of an `eval.<metric>.<field>` key; '' when `parse_key` finds none."""
    parsed = parse_key(key)
    return parsed[0] if parsed else ""


def is_result_field(key: str) -> bool:
    """Whether `key` is one of the fields every result writes (`eval.<metric>.score`, ...)."""
    return key.startswith(PREFIX) and key.endswith(_RESULT_SUFFIXES)


@dataclass(frozen=True)
class EncodedResult:
    """What a span says of one metric, read back: its `eval.<metric>.*` values by field."""

    metric: str
    fields: Mapping[str, Any]  # field ('score', 'errors.planning', ...) -> its value

    def get(self, field: str, default: Any = None) -> Any:
        return self.fields.get(field, default)

    @property
    def score(self) -> float | None:
        return _number(self.fields.get("score"))

    @property
    def label(self) -> str | None:
        return _text(self.fields.get("label"))

    @property
    def explanation(self) -> str | None:
        return _text(self.fields.get("explanation"))

    @property
    def error(self) -> str | None:
        return _text(self.fields.get("error"))

    @property
    def evaluator(self) -> str | None:
        return _text(self.fields.get("evaluator"))

    @property
    def revision(self) -> str | None:
        return _text(self.fields.get("revision"))


def read_results(attributes: Iterable[KeyValue]) -> dict[str, EncodedResult]:
    """Every metric with `eval.<metric>.*` attributes among a span's `attributes`, in the
    order the span has them (usage, `eval.case.id` and the like read as fields too)."""
    fields: dict[str, dict[str, Any]] = {}
    for kv in attributes:
        # The prefix looked at first: most of a span's keys are not ours, and pay no call.
        if kv.key.startswith(PREFIX) and (parsed := parse_key(kv.key)):
            metric, field = parsed
            fields.setdefault(metric, {})[field] = any_value_to_python(kv.value)
    return {metric: EncodedResult(metric, values) for metric, values in fields.items()}


def read_result(attributes: Iterable[KeyValue], metric: str) -> EncodedResult | None:
    """The span's `eval.<metric>.*` values, or None when it has none."""
    keys = result_keys(metric)
    values = {
        kv.key[len(keys.prefix) :]: any_value_to_python(kv.value) for kv in attributes if kv.key.startswith(keys.prefix)
    }
    return EncodedResult(metric, values) if values else None


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


def is_trace_carrier(trace: Trace) -> bool:
    """Whether `trace` holds only `evaluate_trace` carriers spanscore wrote: the results of
    a re-score, not spans of the agent's (nothing to score again)."""
    origins = trace.spans_by_origin
    return bool(origins) and all(
        origin.scope_spans.scope.name == SCOPE_NAME
        and all(origin.scope_spans.spans[position].name == TRACE_SPAN_NAME for position in positions)
        for origin, positions in origins.items()
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
