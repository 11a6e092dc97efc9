"""`spanscore report -o report.html`: the suite's results as one self-contained page.

Everything is inline (CSS, SVG charts, a few lines of script for sorting and expanding),
so the file opens offline and can be attached to a CI run. Sections, per group when the
report is split with `--by`: TSR and SSR, each as its count, the observed rate and the
range of the true rate (the 95% credible interval), SSR beside what it counts; pass@k
and pass^k over k with bands for the suite; the reliability budget ((1 - ε)^N over N for
several per-step error rates, the suite's measured ε and episode length marked); score
distributions per metric; a sortable per-case table whose rows open onto the case's own
pass@k curves and each failed attempt's failed checks and explanations. Every text from
the data is escaped.

Where failure_localization ran on failed attempts, "Why runs fail" charts the failure
categories found in them and lists each category's attempts, each linked to the span it
blamed, shown in the case's details (a link opens the case's row). Without such results
the page is what it was before: no section, style or script is added.

Span-level results (`offline.span_level_html`) close the page: per trace, each
span-level metric's roll-up and worst spans. Scored files with span-level results but no
graded attempt give a page of those alone, saying why there are no suite rates.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import lru_cache
from html import escape
from typing import Any

from spanscore.core.version import VERSION
from spanscore.core.wording import counted, plural
from spanscore.offline import span_level_html
from spanscore.offline.blamed_spans import group_words
from spanscore.offline.page_style import STYLE, breakable
from spanscore.offline.suite_attempts import ScoredRun
from spanscore.offline.suite_report import MAX_CURVE_K, UNGRADED_REASONS_SHOWN, rate_parts, ungraded_reasons
from spanscore.offline.svg_charts import Bar, Marker, Series, bar_chart, histogram, interval_bar, line_chart
from spanscore.processors.localization.taxonomy import taxonomy
from spanscore.processors.metrics.intervals import pass_at_k_interval, pass_pow_k_interval
from spanscore.processors.metrics.pass_at_k import pass_at_k_unbiased, pass_pow_k_unbiased
from spanscore.processors.metrics.reliability import episode_success

BUDGET_ERRORS = (0.001, 0.01, 0.05, 0.1)
# What SSR counts, beside its figure: a wrong argument is no wrong step, which surprises.
SSR_COUNTS = (
    "A step is one tool call; a step is correct when it is an expected tool and did not fail (any tool "
    "that did not fail, for a case without expected calls or a report without <code>--dataset</code>). "
    "Arguments are not checked: a call to the expected tool with a wrong argument is a correct step; "
    "<code>tool_call_accuracy</code> checks arguments."
)
FAILURES_SHOWN = 20  # per case; the rest are in the JSON summary
AT_K, POW_K = "#2563eb", "#dc2626"
# The failure groups' colors: none is the pass green or the fail red of the page.
GROUP_COLORS = {"reasoning": "#7c3aed", "system_execution": "#d97706", "planning_coordination": "#0891b2"}
UNKNOWN_GROUP = "#6b7280"
ATTEMPTS_LINKED = 10  # per category in "Why runs fail"; each case's details list every blamed span
CATEGORY_CHARS = 40  # of a category's label in the chart


def render(summary: dict[str, Any], run: ScoredRun, sources: list[str]) -> str:
    """The whole page for `summary` (grouped or not) computed from `run`."""
    grouped, graded = "groups" in summary, "not_graded" not in summary
    parts_of = summary["groups"].values() if grouped else [summary] if graded else []
    localized = any(_localized(part) for part in parts_of)
    spans = span_level_html.section(summary.get("span_metrics", []))
    style = (BLAME_STYLE if localized else "") + (span_level_html.STYLE if spans else "")
    parts = [_head(style), "<body><main>", _header(summary, sources)]
    if not graded:
        parts.append(f"<p class=note>No suite rates: {escape(summary['not_graded'])}</p>")
    elif grouped:
        parts.append(_group_table(summary))
        for index, (group, part) in enumerate(summary["groups"].items()):
            parts.append(
                f'<section class="group" id="group-{index}"><h2>{escape(summary["by"])} = {escape(group)}</h2>'
            )
            parts.append(_body(part, run.scores.get(group, {}), f"g{index}"))
            parts.append("</section>")
    else:
        parts.append(_body(summary, run.scores.get(None, {}), "g0"))
    parts.append(spans)
    parts.append(f"</main><script>{SCRIPT}{BLAME_SCRIPT if localized else ''}</script></body></html>")
    return "".join(parts)


def _head(extra_style: str = "") -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>spanscore suite report</title><style>{STYLE}{extra_style}</style></head>"
    )


def _localized(summary: dict[str, Any]) -> bool:
    """Whether failure_localization left results on any failed attempt."""
    return any(failure.get("localized") for case in summary["cases"] for failure in case["failures"])


def _header(summary: dict[str, Any], sources: list[str]) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    outcome = summary.get("outcome", "success")
    if "not_graded" in summary:
        what = "span-level results only: no graded attempts"
    elif outcome == "success":
        what = "an attempt succeeds when every ground-truth check of its case passed (eval.success)"
    else:
        what = f"an attempt is a span scored by {outcome}; it succeeds on a pass label"
    return (
        f"<header><h1>Suite report</h1><p class=meta>{escape(', '.join(sources))} · {escape(what)} · "
        f"generated {generated} by spanscore {escape(VERSION)}</p></header>"
    )


def _group_table(summary: dict[str, Any]) -> str:
    rows = []
    for index, (group, part) in enumerate(summary["groups"].items()):
        ssr, steps = part["ssr"], part["steps"]
        tsr_cell = _rate_cell(part["successes"], part["attempts"], part["tsr"])
        ssr_cell = (
            _rate_cell(ssr["estimate"] * steps["attempts_with_steps"], steps["attempts_with_steps"], ssr)
            if ssr
            else "–"
        )
        rows.append(
            f'<tr><td class=name><a href="#group-{index}">{escape(group)}</a></td>'
            f"<td class=num>{part['attempts']}</td><td class=num>{part['successes']}</td>"
            f"<td>{tsr_cell}</td><td>{ssr_cell}</td></tr>"
        )
    return (
        f"<section><h2>Groups by {escape(summary['by'])}</h2><div class=scroll><table class=groups><thead><tr>"
        f"<th>{escape(summary['by'])}</th><th class=num>Attempts</th><th class=num>Successes</th>"
        "<th>TSR</th><th>SSR</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _body(summary: dict[str, Any], scores: dict[str, list[float]], key: str) -> str:
    return "".join(
        [
            _headline(summary),
            "<div class=charts>",
            _suite_curves(summary),
            _budget(summary),
            "</div>",
            _why_runs_fail(summary, key),
            _distributions(scores),
            _cases(summary, key),
        ]
    )


def _headline(summary: dict[str, Any]) -> str:
    tsr, ssr, steps = summary["tsr"], summary["ssr"], summary["steps"]
    attempts = summary["attempts"]
    cards = [
        _card(
            "Task success rate (TSR)",
            (summary["successes"], attempts, tsr),
            f"{summary['successes']} of {counted(attempts, 'attempt')} succeeded",
        )
    ]
    if steps:
        with_steps = steps["attempts_with_steps"]
        rates_sum = ssr["estimate"] * with_steps  # the count the interval is drawn from
        cards.append(
            _card(
                "Step success rate (SSR)",
                (rates_sum, with_steps, ssr),
                f"each attempt's correct steps / steps, averaged over {counted(with_steps, 'attempt')} with "
                "steps (the count above sums their rates)",
                SSR_COUNTS,
            )
        )
    else:
        cards.append(_card("Step success rate (SSR)", None, "no attempt called a tool", SSR_COUNTS))
    cases = len(summary["cases"])
    facts = [f"<b>{cases}</b> {plural(cases, 'case')}", f"<b>{attempts}</b> {plural(attempts, 'attempt')}"]
    if summary["ungraded"]:
        facts.append(
            f"<b class=warn>{summary['ungraded']}</b> ungraded (outcome recorded as an error or skipped, "
            f"left out of the rates)"
        )
        facts += [
            f"<span class=note>{count} × {escape(reason)}</span>"
            for reason, count in ungraded_reasons(summary)[:UNGRADED_REASONS_SHOWN]
        ]
    if steps:
        # A mean, so "steps" whatever its value (1.0 steps).
        facts.append(f"<b>{steps['mean_steps']:.1f}</b> steps per attempt")
        facts.append(f"per-step error <b>{steps['step_error']:.3f}</b>")
    return f'<div class=cards>{"".join(cards)}<div class="card facts">{"<br>".join(facts)}</div></div>'


def _card(title: str, counts: tuple[float, int, dict[str, float]] | None, observed: str, definition: str = "") -> str:
    """A rate as its count and observed rate, then the range of the true rate, then what it counts (HTML)."""
    defines = f"<p class=defines>{definition}</p>" if definition else ""
    if counts is None:
        return f"<div class=card><h3>{title}</h3><p class=big>–</p><p class=note>{escape(observed)}</p>{defines}</div>"
    successes, total, rate = counts
    count, estimate, true_range = rate_parts(successes, total, rate)
    outside = (
        "<p class=note>An observed 0 or 1 lies outside this range: the range is where the true rate lies "
        "with 95% probability given the count (a Bayesian credible interval), never at 0 or 1 exactly.</p>"
        if not rate["low"] <= rate["estimate"] <= rate["high"]
        else ""
    )
    return (
        f"<div class=card><h3>{title}</h3><p class=big>{count} = {estimate}</p>"
        f"<p class=note>{escape(observed)}</p>"
        f"<p class=range>true rate 95% credible <b>{true_range}</b></p>"
        f"{interval_bar(rate['estimate'], rate['low'], rate['high'])}{outside}{defines}</div>"
    )


def _suite_curves(summary: dict[str, Any]) -> str:
    suite = summary["suite"]
    ks = sorted(int(k) for k in suite["pass_at_k"])
    series = [_series("pass@k", suite["pass_at_k"], AT_K), _series("pass^k", suite["pass_pow_k"], POW_K)]
    chart = line_chart(
        series, "k (attempts)", "probability", max(ks), x_min=1, integer_x=True, title="suite pass@k and pass^k over k"
    )
    note = (
        f"Each case's unbiased estimate, averaged over {counted(len(summary['cases']), 'case')}; bands (a bar "
        f"for a single k) hold the true value with 95% probability (credible intervals). k goes up to the fewest "
        f"attempts of any case ({max(ks)}). pass@k: at least one of k attempts succeeds; pass^k: all k do."
    )
    if len(ks) == 1:
        note += " Run each case more than once to see how they change with k."
    return f"<figure><figcaption>pass@k and pass^k, suite</figcaption>{chart}<p class=note>{note}</p></figure>"


def _series(name: str, rates: dict[str, dict[str, float]], color: str) -> Series:
    ks = sorted(rates, key=int)
    return Series(
        name,
        [(int(k), rates[k]["estimate"]) for k in ks],
        band=[(int(k), rates[k]["low"], rates[k]["high"]) for k in ks],
        color=color,
    )


def _budget(summary: dict[str, Any]) -> str:
    steps = summary["steps"]
    length = steps["mean_steps"] if steps else 0.0
    n_max = max(20, int(length * 2 + 0.999))
    ns = list(range(1, n_max + 1))  # the axis starts at 0, so a marker at N = 1 sits clear of the y ticks
    measured = min(max(steps["step_error"], 0.0), 1.0) if steps else None
    references = {e: [(n, episode_success(e, n)) for n in ns] for e in BUDGET_ERRORS}
    if measured is not None:
        # A reference line drawn over by the measured one (within 0.03 everywhere) would only blur it.
        references = {
            e: line
            for e, line in references.items()
            if max(abs(y - episode_success(measured, n)) for n, y in line) >= 0.03
        }
    series = [Series(f"ε = {e:g}", line, markers=False) for e, line in references.items()]
    markers = []
    if measured is not None:
        series.append(
            Series(
                f"measured ε = {measured:.3f}",
                [(n, episode_success(measured, n)) for n in ns],
                color="#111",
                dashed=True,
                markers=False,
            )
        )
        # At the mean length itself, so the circle sits on the measured curve.
        expected = (1 - measured) ** length
        markers.append(Marker(length, expected, f"{length:.1f} steps → {expected:.2f} expected"))
        markers.append(Marker(length, summary["tsr"]["estimate"], f"measured TSR {summary['tsr']['estimate']:.2f}"))
    chart = line_chart(
        series,
        "N (steps per episode)",
        "episode success (1 − ε)^N",
        n_max,
        x_min=0,
        markers=markers,
        title="reliability budget",
    )
    note = "Expected episode success when each of N steps fails independently with probability ε. " + (
        "The circles mark the suite's mean steps per attempt with the success its per-step error predicts, "
        "and the TSR it measured."
        if steps
        else "No attempt called a tool, so no per-step error is marked."
    )
    return f"<figure><figcaption>Reliability budget</figcaption>{chart}<p class=note>{note}</p></figure>"


def _why_runs_fail(summary: dict[str, Any], key: str) -> str:
    """The failure categories of the failed attempts as bars, then each category's attempts,
    each linked to its blamed span in the case's details."""
    if not _localized(summary):
        return ""
    failures = [failure for case in summary["cases"] for failure in case["failures"]]
    localized = sum(1 for failure in failures if failure.get("localized"))
    categories = summary["failure_categories"]
    note = (
        f"The failure categories failure_localization found in the traces of {localized} of "
        f"{counted(len(failures), 'failed attempt')}. A bar counts the failed attempts a category was found in, "
        "each attempt once per category, so the bars may add up to more than the failed attempts. "
        "Each attempt below links to the span blamed for it, in its case's details."
    )
    none_found = sum(1 for failure in failures if failure.get("localized") and not failure["categories"])
    if none_found:
        note += f" On {counted(none_found, 'failed attempt')} no span states an error; those need reading."
    if not categories:
        return f"<section><h2>Why runs fail</h2><p class=note>{escape(note)}</p></section>"
    bars, entries = [], []
    for number, entry in enumerate(categories):
        anchor = f"{key}-why-{number}"
        color = GROUP_COLORS.get(entry["group"] or "", UNKNOWN_GROUP)
        category, group = entry["category"], group_words(entry["group"])
        label = category if len(category) <= CATEGORY_CHARS else category[: CATEGORY_CHARS - 1] + "…"
        attempts = counted(entry["attempts"], "failed attempt")
        bars.append(Bar(label, entry["attempts"], color, f"#{anchor}", f"{category} ({group}): {attempts}"))
        entries.append(_category_entry(summary, key, entry, anchor, color))
    present = list(dict.fromkeys(entry["group"] for entry in categories))
    legend = [(group_words(group), GROUP_COLORS.get(group or "", UNKNOWN_GROUP)) for group in present]
    chart = bar_chart(bars, legend=legend, title="failure categories of failed attempts")
    return (
        f"<section><h2>Why runs fail</h2><p class=note>{escape(note)}</p><div class=why-body>"
        f"<figure class=why-chart><figcaption>Failure categories of failed attempts</figcaption>{chart}</figure>"
        f"<div class=why-list>{''.join(entries)}</div></div></section>"
    )


def _category_entry(summary: dict[str, Any], key: str, entry: dict[str, Any], anchor: str, color: str) -> str:
    """One category: its group and description, then its failed attempts, linked."""
    category = entry["category"]
    known = taxonomy().categories.get(category)
    description = f"<br><span class=note>{escape(known.description)}</span>" if known is not None else ""
    links = []
    for index, case in enumerate(summary["cases"]):
        for number, failure in enumerate(case["failures"], 1):
            if category not in failure["categories"]:
                continue
            blamed = [(j, b) for j, b in enumerate(failure["blamed"]) if b["category"] == category]
            what = f"{breakable(case['case_id'])}, failed attempt {number}"
            where = ""
            if blamed:
                _, first = blamed[0]
                impact = f" · impact {escape(first['impact'])}" if first["impact"] else ""
                where = f" <span class=note>on {escape(first['span_name'] or first['span_id'])}{impact}</span>"
            if number > FAILURES_SHOWN:
                links.append(f"<li>{what} <span class=note>(listed in the JSON summary)</span>{where}</li>")
                continue
            target = f"{key}-{index}-a{number}" + (f"-b{blamed[0][0]}" if blamed else "")
            links.append(f'<li><a href="#{target}">{what}</a>{where}</li>')
    shown = links[:ATTEMPTS_LINKED]
    if len(links) > ATTEMPTS_LINKED:
        more = len(links) - ATTEMPTS_LINKED
        shown.append(f"<li class=note>and {more} more: see the cases' details</li>")
    return (
        f'<div class=why-cat id="{anchor}" style="border-left-color:{color}"><p><b>{escape(category)}</b> '
        f"<span class=note>{escape(group_words(entry['group']))} · {counted(entry['attempts'], 'failed attempt')}, "
        f"{counted(entry['blamed_spans'], 'blamed span')}</span>{description}</p><ul>{''.join(shown)}</ul></div>"
    )


def _distributions(scores: dict[str, list[float]]) -> str:
    if not scores:
        return ""
    figures = []
    for metric, values in sorted(scores.items()):
        mean = sum(values) / len(values)
        figures.append(
            f"<figure class=small><figcaption>{escape(metric)} <span class=note>n={len(values)}, "
            f"mean {mean:.2f}</span></figcaption>{histogram(values, title=metric)}</figure>"
        )
    return (
        "<section><h2>Score distributions</h2><p class=note>Every score of every scored span and session, "
        f"in tenths of [0, 1]. Hover a bar for its count.</p><div class=grid>{''.join(figures)}</div></section>"
    )


def _cases(summary: dict[str, Any], key: str) -> str:
    # pass@1 and pass^1 are the success rate: no columns of their own.
    ks = sorted({int(k) for case in summary["cases"] for k in case["pass_at_k"]} - {1})
    head = [
        "Case",
        "Attempts",
        "Successes",
        "Success rate",
        *(f"pass@{k}" for k in ks),
        *(f"pass^{k}" for k in ks),
        "Progress AUC",
        "Trajectory similarity",
    ]
    rows = []
    for index, case in enumerate(summary["cases"]):
        n, c = case["attempts"], case["successes"]
        cells = [
            (
                case["case_id"],
                "<td class=case-id><button class=open aria-expanded=false>▸</button> "
                f"{breakable(case['case_id'])}</td>",
            ),
            (n, f"<td class=num>{n}</td>"),
            (c, f"<td class=num>{c}</td>"),
            (c / n, f'<td class=num title="{_true_range(*_interval(pass_at_k_interval, n, c, 1))}">{c / n:.2f}</td>'),
        ]
        for rates in (case["pass_at_k"], case["pass_pow_k"]):
            for k in ks:
                rate = rates.get(str(k))
                cells.append(
                    (
                        rate["estimate"],
                        f'<td class=num title="{_true_range(rate["low"], rate["high"])}">{rate["estimate"]:.2f}</td>',
                    )
                    if rate
                    else (-1, '<td class=num title="fewer attempts than k">–</td>')
                )
        for value in (case["progress_auc"], case["trajectory_similarity"]):
            cells.append(
                (value, f"<td class=num>{value:.2f}</td>") if value is not None else (-1, "<td class=num>–</td>")
            )
        row_class = "fail" if c < n else "pass"
        sort_values = escape(json.dumps([v for v, _ in cells]))
        rows.append(f'<tr class="case {row_class}" data-sort="{sort_values}">{"".join(h for _, h in cells)}</tr>')
        rows.append(f"<tr class=detail hidden><td colspan={len(head)}>{_case_detail(case, f'{key}-{index}')}</td></tr>")
    header = "".join(f"<th data-col={i} tabindex=0>{escape(h)}</th>" for i, h in enumerate(head))
    return (
        "<section><h2>Cases</h2><p class=note>Click a column to sort, a case to see its pass@k curves and "
        "the failed checks and explanations of each failed attempt. Hover a rate for the range of its true value "
        "(95% credible). pass@1 and pass^1 equal the success rate.</p>"
        f"<div class=scroll><table class=cases><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody>"
        "</table></div></section>"
    )


def _case_detail(case: dict[str, Any], key: str) -> str:
    n, c = case["attempts"], case["successes"]
    ks = list(range(1, min(n, MAX_CURVE_K) + 1))
    at_k = [(k, pass_at_k_unbiased(n, c, k), *_interval(pass_at_k_interval, n, c, k)) for k in ks]
    pow_k = [(k, pass_pow_k_unbiased(n, c, k), *_interval(pass_pow_k_interval, n, c, k)) for k in ks]
    chart = line_chart(
        [
            Series("pass@k", [(k, e) for k, e, _, _ in at_k], band=[(k, lo, hi) for k, _, lo, hi in at_k], color=AT_K),
            Series(
                "pass^k", [(k, e) for k, e, _, _ in pow_k], band=[(k, lo, hi) for k, _, lo, hi in pow_k], color=POW_K
            ),
        ],
        "k (attempts)",
        "probability",
        max(ks),
        x_min=1,
        integer_x=True,
        width=420,
        height=230,
        title=f"pass@k and pass^k of {case['case_id']}",
    )
    failures = case["failures"]
    if failures:
        items = []
        if case.get("failure_categories"):
            found = " · ".join(
                f"{escape(entry['category'])} {entry['attempts']}" for entry in case["failure_categories"]
            )
            items.append(f"<p class=note>Failure categories of its failed attempts: {found}</p>")
        for number, failure in enumerate(failures[:FAILURES_SHOWN], 1):
            findings = (
                "".join(
                    f"<li><b>{escape(f['metric'])}</b>"
                    + (f" {f['score']:.2f}" if f["score"] is not None else " <span class=warn>error</span>")
                    + f" <span class=note>on {escape(f['where'])}</span><br>{escape(f['text'])}</li>"
                    for f in failure["findings"]
                )
                or "<li>No failed result was recorded on its spans.</li>"
            )
            anchor, blamed = "", ""
            if failure.get("localized"):
                anchor, blamed = f' id="{key}-a{number}"', _blamed_list(failure, f"{key}-a{number}")
            items.append(
                f"<div class=failure{anchor}><p>Failed attempt {number} of {len(failures)} · trace "
                f"<code>{escape(failure['trace_id'])}</code></p><ul>{findings}</ul>{blamed}</div>"
            )
        if len(failures) > FAILURES_SHOWN:
            more = len(failures) - FAILURES_SHOWN
            items.append(
                f"<p class=note>{more} more failed {plural(more, 'attempt is', 'attempts are')} listed in the "
                f"JSON summary (--json).</p>"
            )
        failed = "".join(items)
    else:
        failed = "<p>Every attempt succeeded.</p>"
    return f'<div class=detail-body id="{key}"><figure>{chart}</figure><div class=failures>{failed}</div></div>'


def _blamed_list(failure: dict[str, Any], anchor: str) -> str:
    """The spans failure_localization blamed for one failed attempt, each its link target."""
    if not failure["blamed"]:
        if failure["categories"]:  # named on the root only (no findings on the spans)
            return f"<p class=note>failure_localization: {escape(', '.join(failure['categories']))}</p>"
        return "<p class=note>failure_localization found no error its spans state.</p>"
    items = []
    for j, blame in enumerate(failure["blamed"]):
        impact = f" · impact {escape(blame['impact'])}" if blame["impact"] else ""
        name = f" {escape(blame['span_name'])}" if blame["span_name"] else ""
        trace = (
            f" in trace <code>{escape(blame['trace_id'])}</code>" if blame["trace_id"] != failure["trace_id"] else ""
        )
        evidence = f"<br>evidence: <q>{escape(blame['evidence'])}</q>" if blame["evidence"] else ""
        explanation = f"<br>{escape(blame['explanation'])}" if blame["explanation"] else ""
        items.append(
            f'<li class=blame id="{anchor}-b{j}"><b>{escape(blame["category"])}</b> '
            f"<span class=note>{escape(group_words(blame['group']))}{impact}</span> on span "
            f"<code>{escape(blame['span_id'])}</code>{name}{trace}{evidence}{explanation}</li>"
        )
    return f"<p class=blamed-head>Blamed by failure_localization:</p><ul class=blamed>{''.join(items)}</ul>"


@lru_cache(maxsize=4096)
def _interval(function, n: int, c: int, k: int) -> tuple[float, float]:
    # Many cases share their counts (five attempts give six pairs): each is drawn once.
    interval = function(n, c, k)
    return interval.low, interval.high


def _true_range(low: float, high: float) -> str:
    return f"true value 95% credible {low:.3f}–{high:.3f}"


def _rate_cell(successes: float, total: int, rate: dict[str, float]) -> str:
    count, estimate, true_range = rate_parts(successes, total, rate)
    return f"{count} = {estimate} <span class=note>· true rate 95% credible {true_range}</span>"


# Only on a page with blamed spans: what a link to one needs beyond the base style and script.
BLAME_STYLE = """
.why-body{display:flex;gap:14px;flex-wrap:wrap;align-items:flex-start}.why-chart{flex:0 1 400px}
.why-list{flex:1;min-width:280px}.why-cat{background:#fff;border:1px solid var(--line);border-left:4px solid;
border-radius:6px;padding:6px 10px;margin:0 0 8px}.why-cat p{margin:2px 0}.why-cat ul{margin:4px 0;padding-left:18px}
.why-cat li{overflow-wrap:anywhere}.why-chart svg a:hover text{text-decoration:underline}
.blamed-head{margin:6px 0 0;font-weight:600}.blamed li{margin:4px 0;overflow-wrap:anywhere}
.blame:target,.why-cat:target{background:#fef3c7}
"""

# A link to a blamed span in a closed case row opens the row, then shows the span.
BLAME_SCRIPT = """
function showTarget() {
  var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (!target) return;
  var detail = target.closest('tr.detail');
  if (detail && detail.hidden) {
    detail.hidden = false;
    var button = detail.previousElementSibling.querySelector('button.open');
    button.textContent = '▾';
    button.setAttribute('aria-expanded', 'true');
  }
  // In a table wider than the page, its box scrolls sideways to where the span's text starts.
  target.scrollIntoView({block: 'center', inline: 'start'});
}
window.addEventListener('hashchange', showTarget);
document.addEventListener('click', function (event) {
  var link = event.target.closest('a[href^="#"]');
  if (link && link.getAttribute('href') === location.hash) setTimeout(showTarget, 0);
});
showTarget();
"""

SCRIPT = """
document.querySelectorAll('table.cases').forEach(function (table) {
  var body = table.tBodies[0];
  body.addEventListener('click', function (event) {
    var row = event.target.closest('tr.case');
    if (!row) return;
    var detail = row.nextElementSibling, open = detail.hidden;
    detail.hidden = !open;
    var button = row.querySelector('button.open');
    button.textContent = open ? '▾' : '▸';
    button.setAttribute('aria-expanded', String(open));
  });
  table.tHead.querySelectorAll('th').forEach(function (th) {
    function sort() {
      var col = Number(th.dataset.col);
      var ascending = th.getAttribute('aria-sort') !== 'ascending';
      table.tHead.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
      var pairs = [];
      body.querySelectorAll('tr.case').forEach(function (row) {
        pairs.push([JSON.parse(row.dataset.sort)[col], row, row.nextElementSibling]);
      });
      pairs.sort(function (a, b) {
        var x = a[0], y = b[0];
        var order = (typeof x === 'string') ? String(x).localeCompare(String(y))
            : (x === null ? -1 : x) - (y === null ? -1 : y);
        return ascending ? order : -order;
      });
      pairs.forEach(function (p) { body.appendChild(p[1]); body.appendChild(p[2]); });
    }
    th.addEventListener('click', sort);
    th.addEventListener('keydown', function (event) { if (event.key === 'Enter') sort(); });
  });
});
"""
