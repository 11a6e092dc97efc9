"""What the score metrics observe of a batch of results, summed per series.

Built where the results are: the collector's attach stage, or a scoring worker, which
sends one per round so the collector's thread does not build attribute sets per result.
`ScoreMetrics.record_observations` adds them up, and records each series when a metric
reader collects: a counter increment of the sum, and the histogram's scores already bucketed.
Series attributes are sorted tuples of (key, value), so they hash, pickle and compare.
Label caps (`max_label_values`) are applied when recorded, in the collector, where every
series of the process is seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from spanscore.core.evaluation_event import EVALUATION_NAME, SCORE_LABEL
from spanscore.core.provenance import CODE_PROVENANCE, Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import EVALUATOR, FAILURE_CATEGORY, FAILURE_GROUP, REVISION, SPAN_KIND
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.usage import EvaluatorUsage
from spanscore.exporters.score_histogram import ScoreBuckets, Series

# Counters, each increment keyed by (counter, evaluator for the usage counters, series).
RESULTS = "results"
FAILURES = "failures"
RESCORES = "rescores"
CALLS = "calls"
TOKENS = "tokens"
# The finding attributes the failure counter is broken down by.
FAILURE_LABELS = (FAILURE_CATEGORY, FAILURE_GROUP)


def _series(attributes: Mapping[str, str | int | float | bool]) -> Series:
    return tuple(sorted(attributes.items()))


def _common(service_name: str | None, agent_name: str | None) -> dict[str, str]:
    common = {}
    if service_name:
        common["service.name"] = service_name
    if agent_name:
        common["gen_ai.agent.name"] = agent_name
    return common


def _by_kind(results: Iterable[MetricResult], kinds: Mapping[str, str]) -> dict[str, list[MetricResult]]:
    grouped: dict[str, list[MetricResult]] = {}
    for result in results:
        grouped.setdefault(kinds.get(result.span_id or "", "span"), []).append(result)
    return grouped


def _result_series(
    result: MetricResult, provenance: Mapping[str, Provenance], common: Mapping[str, str | int | float | bool]
) -> Series:
    source = provenance.get(result.name, CODE_PROVENANCE)
    return _series(
        {
            EVALUATION_NAME: result.name,
            SCORE_LABEL: result.label or "error",
            EVALUATOR: source.evaluator,
            REVISION: source.revision,
            **common,
        }
    )


@dataclass
class ScoreObservations:
    """Score histogram buckets and counter increments of some traces and sessions, by series."""

    scores: dict[Series, ScoreBuckets] = field(default_factory=dict)
    counts: dict[tuple[str, str | None, Series], int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.scores or self.counts)

    def _count(self, counter: str, evaluator: str | None, attributes: Mapping[str, str], amount: int) -> None:
        key = (counter, evaluator, _series(attributes))
        self.counts[key] = self.counts.get(key, 0) + amount

    def add_results(
        self,
        results: Iterable[MetricResult],
        service_name: str | None,
        agent_name: str | None,
        span_attributes: Iterable[SpanAttribute] = (),
        copied_attributes: frozenset[str] = frozenset(),
        provenance: Mapping[str, Provenance] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """One score and one result counted per result; `copied_attributes` names the
        processors' attributes that become labels (`span_attributes` in the config);
        `labels`, more of them."""
        common = {a.key: a.value for a in span_attributes if a.key in copied_attributes}
        common.update(_common(service_name, agent_name))
        if labels:
            common.update(labels)
        provenance = provenance or {}
        for result in results:
            series = _result_series(result, provenance, common)
            if result.score is not None:
                buckets = self.scores.get(series)
                if buckets is None:
                    buckets = self.scores[series] = ScoreBuckets()
                buckets.add(result.score)
            key = (RESULTS, None, series)
            self.counts[key] = self.counts.get(key, 0) + 1

    def add_rescores(
        self,
        results: Iterable[MetricResult],
        service_name: str | None,
        agent_name: str | None,
        provenance: Mapping[str, Provenance] | None = None,
    ) -> None:
        """One re-score counted per result of a trace scored again (late spans), by the
        labels of the results counter: its score is in no histogram, its trace's first
        result is the one counted as a result."""
        common = _common(service_name, agent_name)
        for result in results:
            key = (RESCORES, None, _result_series(result, provenance or {}, common))
            self.counts[key] = self.counts.get(key, 0) + 1

    def add_span_results(
        self,
        results: Iterable[MetricResult],
        kinds: Mapping[str, str],
        service_name: str | None,
        agent_name: str | None,
        provenance: Mapping[str, Provenance] | None = None,
    ) -> None:
        """Span-level results, each counted as `add_results` does, with the kind of its
        span (`kinds`, by span id) as one more label: a handful of values, not one per span."""
        for kind, of_kind in _by_kind(results, kinds).items():
            self.add_results(of_kind, service_name, agent_name, (), frozenset(), provenance, {SPAN_KIND: kind})

    def add_findings(self, findings: Iterable[SpanFinding], service_name: str | None, agent_name: str | None) -> None:
        """One failure counted per finding that names a category."""
        common = _common(service_name, agent_name)
        for finding in findings:
            labels = {key: finding.attribute(key) for key in FAILURE_LABELS}
            if labels[FAILURE_CATEGORY] is None:
                continue
            attributes = {key: str(value) for key, value in labels.items() if value is not None}
            self._count(FAILURES, None, {**attributes, **common}, 1)

    def add_usage(self, usage: EvaluatorUsage, service_name: str | None, agent_name: str | None) -> None:
        common = _common(service_name, agent_name)
        self._count(CALLS, usage.evaluator, common, usage.calls)
        self._count(TOKENS, usage.evaluator, {**common, "gen_ai.token.type": "input"}, usage.input_tokens)
        self._count(TOKENS, usage.evaluator, {**common, "gen_ai.token.type": "output"}, usage.output_tokens)

    def update(self, other: ScoreObservations) -> None:
        for series, buckets in other.scores.items():
            mine = self.scores.get(series)
            if mine is None:
                mine = self.scores[series] = ScoreBuckets()
            mine.merge(buckets)
        for key, amount in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + amount
