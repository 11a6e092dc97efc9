"""Span-level results read back from scored files, per trace: what `report` lists of them.

A span-level metric (`rag_metrics`' faithfulness, any metric with a span target) writes
each result on the span it is about and its roll-up on the trace's root
(`eval.<metric>.spans/.failing/.min/.mean`, docs/score-encoding.md). Per trace and such
metric this reads the roll-up and, bounded, the worst of its spans: the failing ones,
lowest score first, then those whose result is an error, each with its name, kind (as
the conventions read it: llm, tool, retrieval, agent, span) and explanation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import read_result, read_results
from spanscore.core.trace import Trace
from spanscore.core.wording import counted
from spanscore.processors.span_target import span_kinds

WORST_SPANS = 5  # per trace and metric: the failing spans named (JSON, text, page); the rest are counted
EXPLANATION_CHARS = 300  # of each named span's explanation, in the JSON and the page
TRACES_SHOWN = 20  # traces the text lists; the JSON has every one, the page `PAGE_TRACES`
TEXT_EXPLANATION_CHARS = 160


@dataclass(frozen=True)
class SpanFinding:
    """A span whose result failed (or could not be computed: `score` None, `text` the error)."""

    span_id: str
    span_name: str
    kind: str
    score: float | None
    text: str


@dataclass(frozen=True)
class SpanMetric:
    """One span-level metric on one trace: its roll-up and its worst spans."""

    trace_id: str
    root: str  # the root span's name
    group: str | None
    metric: str
    spans: int
    failing: int
    errors: int
    min: float | None
    mean: float | None
    worst: tuple[SpanFinding, ...]  # at most WORST_SPANS

    @property
    def not_shown(self) -> int:
        """Failing or errored spans beyond those named."""
        return self.failing + self.errors - len(self.worst)


def span_metrics_of(trace: Trace, group: str | None = None) -> list[SpanMetric]:
    """Each span-level metric rolled up on `trace`'s root, in the order the root has them."""
    anchor = trace.anchor
    if anchor is None:
        return []
    rolled_up = [result for result in read_results(anchor.attributes).values() if "spans" in result.fields]
    if not rolled_up:
        return []
    spans = [span for span, _ in trace.spans() if span is not anchor]
    found = []
    for rollup in rolled_up:
        failing: list[tuple[float, SpanFinding]] = []
        errored: list[SpanFinding] = []
        for span in spans:
            result = read_result(span.attributes, rollup.metric)
            if result is None:
                continue
            if result.error is not None:
                errored.append(SpanFinding(span.span_id.hex(), span.name, "", None, result.error))
            elif result.label == "fail":
                text = result.explanation or ""
                score = result.score
                finding = SpanFinding(span.span_id.hex(), span.name, "", score, text)
                failing.append((score if score is not None else 0.0, finding))
        failing.sort(key=lambda pair: pair[0])
        worst = ([finding for _, finding in failing] + errored)[:WORST_SPANS]
        kinds = span_kinds(trace, {finding.span_id for finding in worst})
        worst = [
            SpanFinding(f.span_id, f.span_name, kinds[f.span_id], f.score, excerpt(f.text, EXPLANATION_CHARS))
            for f in worst
        ]
        found.append(
            SpanMetric(
                trace_id=trace.trace_id_hex,
                root=anchor.name,
                group=group,
                metric=rollup.metric,
                spans=_count(rollup.get("spans")),
                failing=_count(rollup.get("failing")),
                errors=_count(rollup.get("errors")),
                min=_number(rollup.get("min")),
                mean=_number(rollup.get("mean")),
                worst=tuple(worst),
            )
        )
    return found


def summary(found: Sequence[SpanMetric]) -> list[dict[str, Any]]:
    """Per trace (those with the most failing spans first), its span-level metrics as the
    JSON summary's `span_metrics` holds them."""
    by_trace: dict[str, list[SpanMetric]] = {}
    for metric in found:
        by_trace.setdefault(metric.trace_id, []).append(metric)
    traces = []
    for trace_id, metrics in by_trace.items():
        entry: dict[str, Any] = {"trace_id": trace_id, "root": metrics[0].root}
        if metrics[0].group is not None:
            entry["group"] = metrics[0].group
        entry["metrics"] = [
            {
                "metric": m.metric,
                "spans": m.spans,
                "failing": m.failing,
                "errors": m.errors,
                "min": m.min,
                "mean": m.mean,
                "worst": [asdict(finding) for finding in m.worst],
                "not_shown": m.not_shown,
            }
            for m in metrics
        ]
        traces.append(entry)
    return sorted(traces, key=lambda t: (-sum(m["failing"] + m["errors"] for m in t["metrics"]), t["trace_id"]))


def text_lines(traces: Sequence[dict[str, Any]]) -> list[str]:
    """The `span_metrics` of a summary as the printout's lines: per trace, each metric's
    roll-up and its worst spans; the first `TRACES_SHOWN` traces."""
    if not traces:
        return []
    lines = [
        "span-level metrics per trace (spans scored, failing, lowest and mean score; "
        f"the worst {WORST_SPANS} failing spans; traces with failing spans first):"
    ]
    for trace in traces[:TRACES_SHOWN]:
        group = f" [{trace['group']}]" if "group" in trace else ""
        lines.append(f"  trace {trace['trace_id']} {excerpt(trace['root'], 80)}{group}")
        for m in trace["metrics"]:
            errors = f", {m['errors']} with an error" if m["errors"] else ""
            lines.append(
                f"    {m['metric']}: {counted(m['spans'], 'span')} scored, {m['failing']} failing{errors}"
                f" · min {_shown(m['min'])} · mean {_shown(m['mean'])}"
            )
            for finding in m["worst"]:
                score = "error" if finding["score"] is None else f"{finding['score']:.2f}"
                lines.append(
                    f"      {score} {excerpt(finding['span_name'], 60)} ({finding['kind']}, {finding['span_id']}): "
                    f"{excerpt(finding['text'], TEXT_EXPLANATION_CHARS)}"
                )
            if m["not_shown"]:
                lines.append(f"      ... and {counted(m['not_shown'], 'more failing span')}, not listed")
    if len(traces) > TRACES_SHOWN:
        lines.append(f"  ... and {counted(len(traces) - TRACES_SHOWN, 'more trace')} (see --json or -o)")
    return lines


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
