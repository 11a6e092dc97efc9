"""The span-level section of `spanscore report -o`: per trace, each span-level metric's
roll-up (spans scored, failing, lowest and mean score) and its worst failing spans with
their name, kind and explanation. Every text from the data is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from spanscore.core.wording import counted
from spanscore.offline.page_style import breakable
from spanscore.offline.span_level import WORST_SPANS

PAGE_TRACES = 200  # traces the page lists, those with failing spans first; the JSON has all

STYLE = """
.spanlevel th{cursor:default}.spanlevel tbody{border-top:2px solid var(--line)}
.spanlevel tr.trace th{background:#fff;font-weight:600;overflow-wrap:anywhere}
.spanlevel th.num{width:1%}.spanlevel td.metric{overflow-wrap:anywhere;min-width:6em}
.spanlevel tr.failing td.metric{border-left:3px solid var(--fail)}
.spanlevel tr.passing td.metric{border-left:3px solid var(--pass)}
.worst{margin:0;padding-left:18px}.worst li{margin:2px 0 6px;overflow-wrap:anywhere}
"""


def section(traces: Sequence[dict[str, Any]]) -> str:
    """The section for a summary's `span_metrics`; empty when there are none."""
    if not traces:
        return ""
    shown = traces[:PAGE_TRACES]
    more = (
        f" The first {PAGE_TRACES} of {counted(len(traces), 'trace')} are listed; the JSON summary (--json) has all."
        if len(traces) > PAGE_TRACES
        else ""
    )
    head = "".join(
        f"<th{' class=num' if numeric else ''}>{name}</th>"
        for name, numeric in (("Metric", False), ("Spans", True), ("Failing", True), ("Min", True), ("Mean", True))
    )
    bodies = "".join(_trace(trace) for trace in shown)
    return (
        "<section id=span-level><h2>Span-level results</h2><p class=note>Metrics scored on spans (a model call, "
        "a retrieval, a tool call) rather than on the whole trace: per trace, each one's roll-up from its root "
        f"span, and its worst {WORST_SPANS} failing spans, lowest score first, with their kind and explanation. "
        f"Traces with failing spans first.{more}</p>"
        f"<div class=scroll><table class=spanlevel><thead><tr>{head}</tr></thead>{bodies}</table></div></section>"
    )


def _trace(trace: dict[str, Any]) -> str:
    group = f" <span class=note>{escape(trace['group'])}</span>" if "group" in trace else ""
    rows = [
        f"<tr class=trace><th colspan=5 scope=rowgroup>{escape(trace['root'])} "
        f"<code>{escape(trace['trace_id'])}</code>{group}</th></tr>"
    ]
    for metric in trace["metrics"]:
        state = "failing" if metric["failing"] or metric["errors"] else "passing"
        errors = f" <span class=warn>+{metric['errors']} error</span>" if metric["errors"] else ""
        rows.append(
            f"<tr class={state}><td class=metric>{breakable(metric['metric'])}</td>"
            f"<td class=num>{metric['spans']}</td><td class=num>{metric['failing']}{errors}</td>"
            f"<td class=num>{_number(metric['min'])}</td><td class=num>{_number(metric['mean'])}</td></tr>"
        )
        if metric["worst"]:
            rows.append(f"<tr class=spans><td colspan=5>{_worst(metric)}</td></tr>")
    return f"<tbody>{''.join(rows)}</tbody>"


def _worst(metric: dict[str, Any]) -> str:
    items = []
    for finding in metric["worst"]:
        score = "<span class=warn>error</span>" if finding["score"] is None else f"<b>{finding['score']:.2f}</b>"
        items.append(
            f"<li>{score} {escape(finding['span_name'])} <span class=note>{escape(finding['kind'])} · "
            f"<code>{escape(finding['span_id'])}</code></span><br>{escape(finding['text'])}</li>"
        )
    if metric["not_shown"]:
        items.append(f"<li class=note>and {counted(metric['not_shown'], 'more failing span')}, not listed</li>")
    return f"<ul class=worst>{''.join(items)}</ul>"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"
