"""`spanscore agree -o agree.html`: does the judge agree with people? As one self-contained page.

Everything is inline (CSS and SVG; no script), so the file opens offline and can be
attached to a CI run. Per group (metric · evaluator · revision), the same content as the
printout (`offline.agreement_report`): a row of headline cards (κ with its interval and
kind, accuracy, the failing class's F1 with its precision and recall, Spearman's ρ where
people gave scores, the counts), each interval also drawn as a bar on the statistic's
range; the judge's κ beside people's κ with each other (the human ceiling); the judge's
consistency over trials; the configured threshold beside the one that best matches
people; the confusion tables (people in rows, the judge in columns, agreement on the
diagonal); the first disagreements, farthest apart first. The method of the intervals
closes the page.

Every text from the data is escaped (notes and explanations come from people and models),
its control and bidirectional characters written as escapes (`core.quoting.excerpt`), and
long texts are cut short: the full ones are in `--json`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from html import escape
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.core.version import VERSION
from spanscore.core.wording import counted, plural
from spanscore.offline.agreement_report import SHOWN_DISAGREEMENTS, number, with_interval
from spanscore.offline.agreement_stats import CONFIDENCE
from spanscore.offline.page_style import STYLE

TEXT_CHARS = 300  # of an explanation or a note in the disagreements table
NAME_CHARS = 80  # of a span name, an annotator, a class
KAPPA_RANGE, UNIT_RANGE = (-1.0, 1.0), (0.0, 1.0)
AGREE_RGB, DIFFER_RGB = "5,150,105", "220,38,38"  # --pass and --fail of the shared style


def render(results: Sequence[dict[str, Any]], method_text: str, files: Sequence[str]) -> str:
    """The whole page for `results` (`agreement.compare`'s, one per group)."""
    parts = [_head(), "<body><main>", _header(files)]
    if len(results) > 1:
        parts.append(_overview(results))
    for index, result in enumerate(results):
        parts.append(_group(result, index))
    parts.append(_footer(method_text))
    parts.append("</main></body></html>")
    return "".join(parts)


def _head() -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>spanscore judge agreement</title><style>{STYLE}{AGREEMENT_STYLE}</style></head>"
    )


def _header(files: Sequence[str]) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<header><h1>Judge agreement</h1>"
        f"<p class=meta>{escape(', '.join(files))} · people's labels against the judge's scores on the same "
        f"spans, per metric, evaluator and revision · generated {generated} by spanscore {escape(VERSION)}</p>"
        "</header>"
    )


def _overview(results: Sequence[dict[str, Any]]) -> str:
    rows = []
    for index, result in enumerate(results):
        rows.append(
            f'<tr><td class=name><a href="#group-{index}">{_group_name(result)}</a></td>'
            f"<td class=num>{result['n']:,}</td><td class=num>{result['traces']:,}</td>"
            f"<td class=num>{escape(with_interval(result['kappa']))}</td>"
            f"<td class=num>{escape(with_interval(result['accuracy']))}</td>"
            f"<td class=num>{len(result['disagreements']):,}</td></tr>"
        )
    return (
        f"<section><h2>{len(results)} groups</h2><div class=scroll><table class=overview><thead><tr>"
        "<th>Metric · evaluator · revision</th><th class=num>Labels</th><th class=num>Traces</th>"
        "<th class=num>κ</th><th class=num>Accuracy</th><th class=num>Disagreements</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></section>"
    )


def _group_name(result: dict[str, Any]) -> str:
    # As the printout quotes them (`agreement_report.heading`): what the spans said, a client's text.
    revision = f" · revision {_plain(result['revision'], 40)}" if result["revision"] else ""
    return f"{_plain(result['metric'], NAME_CHARS)} · {_plain(result['evaluator'], NAME_CHARS)}{revision}"


def _group(result: dict[str, Any], index: int) -> str:
    counts = f"{counted(result['n'], 'label')} on {counted(result['traces'], 'trace')}"
    return "".join(
        [
            f'<section class=group id="group-{index}"><h2>{_group_name(result)}</h2>',
            f"<p class=meta>{counts}</p>",
            _headline(result),
            "<div class=panels>",
            _ceiling(result),
            _consistency(result["consistency"]),
            _threshold(result["best_threshold"]),
            "</div><div class=tables>",
            _confusion(
                result["confusion"],
                "Classes: people (rows) by the judge (columns)",
                "A person's class is their label, or for a score without one, pass when the score reaches the "
                "judge's threshold; the judge's is the label on the span.",
            ),
            _confusion(
                result["scale_confusion"],
                f"Scale points ({_plain(result['scale'] or '', NAME_CHARS)}): people (rows) by the judge (columns)",
                "The judge's 0–1 score mapped to the scale's nearest point.",
            )
            if result["scale_confusion"] is not None
            else "",
            "</div>",
            _disagreements(result["disagreements"]),
            "</section>",
        ]
    )


# The headline cards.


def _headline(result: dict[str, Any]) -> str:
    right = _agreeing(result["confusion"])
    cards = [
        _card(
            "κ, the judge vs people",
            result["kappa"],
            KAPPA_RANGE,
            _plain(result["kappa_kind"], 300),
            "Undefined on these labels (as when both sides used a single class).",
        ),
        _card(
            "Accuracy",
            result["accuracy"],
            UNIT_RANGE,
            f"{right:,} of {counted(result['n'], 'label')} in the judge's class",
        ),
        _card(
            f"F1 of {result['failing']}",
            result["f1"],
            UNIT_RANGE,
            f"precision <b>{escape(with_interval(result['precision']))}</b>: of what the judge failed, how much "
            f"people failed; recall <b>{escape(with_interval(result['recall']))}</b>: of what people failed, "
            "how much the judge failed",
            "Undefined on these labels (as when neither side failed anything).",
        ),
    ]
    if result["spearman"] is not None:
        cards.append(
            _card(
                "Spearman's ρ",
                result["spearman"],
                KAPPA_RANGE,
                "people's scores against the judge's, by rank",
                "Undefined on these labels (as when every score is the same).",
            )
        )
    disagreeing = len(result["disagreements"])
    facts = [
        f"<b>{result['n']:,}</b> {plural(result['n'], 'label')} on <b>{result['traces']:,}</b> "
        f"{plural(result['traces'], 'trace')}",
        f"<b>{disagreeing:,}</b> {plural(disagreeing, 'disagreement')}",
    ]
    if result["scale"]:
        facts.append(f"scored on <b>{_plain(result['scale'], NAME_CHARS)}</b>")
    cards.append(f'<div class="card facts">{"<br>".join(facts)}</div>')
    return f"<div class=cards>{''.join(cards)}</div>"


def _agreeing(confusion: dict[str, dict[str, int]]) -> int:
    return sum(cells.get(name, 0) for name, cells in confusion.items())


def _card(title: str, stat: dict[str, Any], bounds: tuple[float, float], note: str, undefined: str = "") -> str:
    """A statistic as its estimate, its interval in words and drawn; `note` and `undefined` are HTML."""
    estimate, low, high = stat["estimate"], stat["low"], stat["high"]
    if estimate is None:
        figure = "<p class=big>n/a</p>" + (f"<p class=note>{undefined}</p>" if undefined else "")
    else:
        interval = (
            f"<p class=range>{CONFIDENCE:.0%} interval <b>[{number(low)}, {number(high)}]</b></p>"
            if low is not None and high is not None
            else "<p class=range>no interval: undefined on the resamples</p>"
        )
        figure = f"<p class=big>{number(estimate)}</p>{interval}"
    return (
        f"<div class=card><h3>{escape(title)}</h3>{figure}{_bar(stat, bounds, width=190)}<p class=note>{note}</p></div>"
    )


def _bar(stat: dict[str, Any] | None, bounds: tuple[float, float], *, width: int = 220) -> str:
    """An estimate with its interval on `bounds`, as a thin bar with the ends (and 0) marked."""
    lo, hi = bounds
    height, track = 30, 10

    def x(value: float) -> float:
        return 6 + (min(max(value, lo), hi) - lo) / (hi - lo) * (width - 12)

    estimate = stat["estimate"] if stat else None
    low, high = (stat["low"], stat["high"]) if stat else (None, None)
    if estimate is None:
        label = "undefined"
    elif low is None or high is None:
        label = f"{estimate:.3f}, no interval"
    else:
        label = f"{estimate:.3f}, {CONFIDENCE:.0%} interval {low:.3f} to {high:.3f}"
    label += f", on {lo:g} to {hi:g}"
    parts = [
        f'<svg class=bar xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>',
        f'<rect x="6" y="{track - 1}" width="{width - 12}" height="2" fill="#d1d5db"/>',
    ]
    ticks = [lo, 0.0, hi] if lo < 0 < hi else [lo, (lo + hi) / 2, hi]
    for tick in ticks:
        anchor = "start" if tick == lo else "end" if tick == hi else "middle"
        shown = f"{tick:g}".replace("-", "−")
        parts.append(
            f'<rect x="{x(tick) - 0.5:.1f}" y="{track + 3}" width="1" height="4" fill="#9ca3af"/>'
            f'<text x="{x(tick) + (-4 if anchor == "start" else 4 if anchor == "end" else 0):.1f}" y="{height - 2}" '
            f'font-size="10" text-anchor="{anchor}" fill="#4b5563">{shown}</text>'
        )
    if estimate is not None:
        if low is not None and high is not None:
            parts.append(
                f'<rect class=interval x="{x(low):.1f}" y="{track - 4}" width="{max(x(high) - x(low), 1):.1f}" '
                f'height="8" rx="3" fill="#93c5fd"/>'
            )
        parts.append(
            f'<rect class=estimate x="{x(estimate) - 1.5:.1f}" y="{track - 8}" width="3" height="16" fill="#1e3a8a"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


# The panels: the human ceiling, the judge with itself, the threshold.


def _ceiling(result: dict[str, Any]) -> str:
    human = result["human_kappa"]
    rows = [_ceiling_row("the judge vs people", result["kappa"], f"on {counted(result['n'], 'label')}")]
    if human is None:
        rows.append(
            "<div class=versus><span class=who>people vs people</span><span class=what>no item was labelled by "
            "two people: have some items labelled twice to see the ceiling</span></div>"
        )
    else:
        rows.append(
            _ceiling_row(
                "people vs people",
                human,
                f"on {counted(human['items'], 'item')} labelled twice or more "
                f"({counted(human['pairs'], 'pair')} of people)",
            )
        )
    return (
        "<figure class=panel><figcaption>κ: the judge vs people, against people vs people</figcaption>"
        f"{''.join(rows)}<p class=note>People's κ with each other is the ceiling a judge can be held to: a judge "
        "that agrees with people as well as they agree with each other can do no better on these labels.</p>"
        "</figure>"
    )


def _ceiling_row(who: str, stat: dict[str, Any], on: str) -> str:
    return (
        f"<div class=versus><span class=who>{who}</span><b class=value>κ {escape(with_interval(stat))}</b>"
        f"<span class=what>{escape(on)}</span>{_bar(stat, KAPPA_RANGE, width=260)}</div>"
    )


def _consistency(consistency: dict[str, Any] | None) -> str:
    if consistency is None:
        body = (
            "<p>The judge was asked once per item (no <code>trial_scores</code> on the spans): nothing to compare "
            "it with.</p>"
        )
    else:
        split = consistency["split_rate"]
        body = (
            f"<p><b>{consistency['trials']:g}</b> trials on <b>{consistency['items']:,}</b> "
            f"{plural(consistency['items'], 'item')}</p>"
            f"<p>mean spread (stdev) <b>{number(consistency['mean_stdev'])}</b>, largest "
            f"<b>{number(consistency['max_stdev'])}</b></p>"
            f"<p>trials split pass/fail on <b>{split:.0%}</b> of items</p>"
            f"{_bar({'estimate': split, 'low': None, 'high': None}, UNIT_RANGE, width=260)}"
        )
    return f"<figure class=panel><figcaption>The judge with itself</figcaption>{body}</figure>"


def _threshold(best: dict[str, Any] | None) -> str:
    caption = "<figcaption>Threshold: configured vs best match with people</figcaption>"
    if best is None:
        return (
            f"<figure class=panel>{caption}<p>None to fit: no pass/fail labels, or the judge gave a single "
            "score.</p></figure>"
        )
    lines = []
    if best["configured"] is not None:
        lines.append(
            f"<p>{CONFIGURED_KEY}configured <b>{number(best['configured'])}</b> "
            f"(κ {number(best['kappa_at_configured'])})</p>"
        )
    else:
        lines.append(f"<p>{CONFIGURED_KEY}configured threshold not on the spans</p>")
    if best["estimate"] is None:
        lines.append("<p>No cut tells the labels apart (people used one class).</p>")
    else:
        lines.append(
            f"<p>{BEST_KEY}best match with people <b>{escape(with_interval(best))}</b> (κ {number(best['kappa'])})</p>"
        )
    lines.append("<p class=note>The judge's score passes when it is at least the threshold.</p>")
    return f"<figure class=panel>{caption}{''.join(lines)}{_threshold_axis(best)}</figure>"


def _threshold_axis(best: dict[str, Any], *, width: int = 260) -> str:
    """The judge's 0–1 score, the configured threshold dashed, the best one with its interval."""
    height, track = 34, 14

    def x(value: float) -> float:
        return 6 + min(max(value, 0.0), 1.0) * (width - 12)

    parts = [
        f'<svg class=bar xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="thresholds on the judge\'s score, 0 to 1">',
        f'<rect x="6" y="{track - 1}" width="{width - 12}" height="2" fill="#d1d5db"/>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1):
        anchor = "start" if tick == 0 else "end" if tick == 1 else "middle"
        parts.append(
            f'<rect x="{x(tick) - 0.5:.1f}" y="{track + 3}" width="1" height="4" fill="#9ca3af"/>'
            f'<text x="{x(tick) + (-4 if tick == 0 else 4 if tick == 1 else 0):.1f}" y="{height - 2}" font-size="10" '
            f'text-anchor="{anchor}" fill="#4b5563">{tick:g}</text>'
        )
    if best["estimate"] is not None:
        if best["low"] is not None and best["high"] is not None:
            parts.append(
                f'<rect class=interval x="{x(best["low"]):.1f}" y="{track - 4}" '
                f'width="{max(x(best["high"]) - x(best["low"]), 1):.1f}" height="8" rx="3" fill="#93c5fd"/>'
            )
        parts.append(
            f'<rect class=estimate x="{x(best["estimate"]) - 1.5:.1f}" y="{track - 8}" width="3" height="16" '
            f'fill="#1e3a8a"><title>best match {best["estimate"]:.3f}</title></rect>'
        )
    if best["configured"] is not None:
        at = x(best["configured"])
        parts.append(
            f'<line class=configured x1="{at:.1f}" y1="1" x2="{at:.1f}" y2="{track + 8}" stroke="#111827" '
            f'stroke-width="2" stroke-dasharray="3 2"><title>configured {best["configured"]:.3f}</title></line>'
        )
    parts.append("</svg>")
    return "".join(parts)


# The confusion tables.


def _confusion(confusion: dict[str, dict[str, int]], caption: str, note: str) -> str:
    columns = list(next(iter(confusion.values()), {}))
    largest = max([count for cells in confusion.values() for count in cells.values()] + [1])
    head = "".join(f"<th scope=col class=num>{_plain(column, NAME_CHARS)}</th>" for column in columns)
    rows = []
    for name, cells in confusion.items():
        tds = []
        for column in columns:
            count = cells.get(column, 0)
            agree = column == name
            kind = "agree" if agree else "differ"
            shade = f"rgba({AGREE_RGB if agree else DIFFER_RGB},{0.08 + 0.32 * count / largest:.2f})"
            style = f' style="background:{shade}"' if count else ""
            tds.append(f'<td class="num {kind}"{style}>{count:,}</td>')
        total = sum(cells.values())
        rows.append(
            f"<tr><th scope=row>{_plain(name, NAME_CHARS)}</th>{''.join(tds)}<td class='num total'>{total:,}</td></tr>"
        )
    sums = [sum(cells.get(column, 0) for cells in confusion.values()) for column in columns]
    totals = "".join(f"<td class='num total'>{total:,}</td>" for total in sums)
    grand = sum(sum(cells.values()) for cells in confusion.values())
    return (
        f"<figure class=confusion-figure><figcaption>{caption}</figcaption><div class=scroll>"
        "<table class=confusion><thead><tr><th scope=col class=corner><span>people ↓</span> <span>judge →</span></th>"
        f"{head}<th scope=col class='num total'>total</th></tr></thead><tbody>{''.join(rows)}</tbody>"
        f"<tfoot><tr><th scope=row>total</th>{totals}<td class='num total'>{grand:,}</td></tr></tfoot></table></div>"
        f"<p class=note>{note} Green: the same class (the diagonal); red: different; the darker, the more labels."
        "</p></figure>"
    )


# The disagreements.


def _disagreements(disagreements: Sequence[dict[str, Any]]) -> str:
    if not disagreements:
        return (
            "<section><h3 class=section>Disagreements</h3><p>None: people and the judge put every label in the "
            "same class.</p></section>"
        )
    shown = disagreements[:SHOWN_DISAGREEMENTS]
    rows = [_disagreement_row(position, d) for position, d in enumerate(shown, 1)]
    return (
        f"<section><h3 class=section>Disagreements, farthest apart first ({len(shown)} of {len(disagreements):,}; "
        "all in --json)</h3><p class=note>How far apart: the judge's score against the person's score on 0–1, "
        "or against 1 for pass and 0 for fail.</p><div class=scroll><table class=disagreements>"
        "<colgroup><col class=c-rank><col class=c-trace><col class=c-span><col class=c-judge><col class=c-text>"
        "<col class=c-person><col class=c-who><col class=c-text></colgroup><thead><tr>"
        "<th>#</th><th>Trace</th><th>Span</th><th>Judge</th><th>Judge's explanation</th><th>Person</th>"
        f"<th>Annotator</th><th>Person's note</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
        "</section>"
    )


def _disagreement_row(position: int, d: dict[str, Any]) -> str:
    person = _verdict(d["human_label"])
    if d["human_score"] is not None:
        person += f" <span class=score>{d['human_score']:g} on {_plain(d['human_scale'] or '', NAME_CHARS)}</span>"
    span_name = _plain(d["span_name"], NAME_CHARS) if d["span_name"] else "<span class=note>unnamed</span>"
    return (
        f"<tr><td class=num>{position}<br><span class=note>{d['severity']:.2f} apart</span></td>"
        f"<td><code class=id>{_plain(d['trace_id'], 40)}</code></td>"
        f"<td>{span_name}<br><code class=id>{_plain(d['span_id'], 40)}</code></td>"
        f"<td>{_verdict(d['judge_label'])} <span class=score>{d['judge_score']:.2f}</span></td>"
        f"<td class=text>{_text(d['judge_explanation'])}</td>"
        f"<td>{person}</td>"
        f"<td>{_plain(d['annotator'], NAME_CHARS) if d['annotator'] else '–'}</td>"
        f"<td class=text>{_text(d['note'])}</td></tr>"
    )


def _verdict(label: str) -> str:
    kind = {"pass": "pass", "fail": "fail"}.get(label, "other")
    return f"<b class='verdict {kind}'>{_plain(label, NAME_CHARS)}</b>"


def _text(text: str | None) -> str:
    """A person's note or the judge's explanation: whitespace collapsed, cut short, escaped."""
    if not text:
        return "–"
    return _plain(re.sub(r"\s+", " ", text).strip(), TEXT_CHARS)


def _plain(text: str, limit: int) -> str:
    """`text` for the page: control and bidirectional characters as escapes, cut to `limit`, escaped."""
    return escape(excerpt(str(text), limit))


def _footer(method_text: str) -> str:
    return (
        f"<footer><p class=method>{escape(method_text)}.</p><p class=note>Each figure reads as its estimate "
        f"and its {CONFIDENCE:.0%} interval in brackets. The bars draw the interval (shaded) and the estimate "
        "(the dark tick) on the statistic's range: −1 to 1 for κ and ρ, 0 to 1 otherwise. n/a: undefined on "
        "these labels.</p></footer>"
    )


# The threshold panel's keys: the configured threshold dashed, the best one as its interval and estimate.
CONFIGURED_KEY = (
    '<svg class=key xmlns="http://www.w3.org/2000/svg" viewBox="0 0 18 12" width="18" height="12" aria-hidden="true">'
    '<line x1="9" y1="0" x2="9" y2="12" stroke="#111827" stroke-width="2" stroke-dasharray="3 2"/></svg>'
)
BEST_KEY = (
    '<svg class=key xmlns="http://www.w3.org/2000/svg" viewBox="0 0 18 12" width="18" height="12" aria-hidden="true">'
    '<rect x="1" y="2" width="16" height="8" rx="3" fill="#93c5fd"/><rect x="7.5" y="0" width="3" height="12" '
    'fill="#1e3a8a"/></svg>'
)

# Added to the report's shared style: the panels, the confusion tables, the disagreements.
AGREEMENT_STYLE = """
h1,h2,.meta{overflow-wrap:anywhere}h3{text-transform:none;letter-spacing:0}
h3.section{font-size:15px;margin:22px 0 4px;color:var(--fg)}
section.group{border-top:2px solid var(--line);margin-top:28px}
th{cursor:default;user-select:auto}.cards .card{min-width:200px}.card.facts{flex:0 1 auto;min-width:170px}
.card .note{overflow-wrap:anywhere}svg.bar{display:block;margin:6px 0 2px;max-width:100%;height:auto}
.panels,.tables{display:flex;gap:14px;flex-wrap:wrap;margin:14px 0}
figure.panel{flex:1 1 300px;min-width:0}figure.panel p{margin:4px 0}.versus{margin:8px 0 12px}
.versus .who{display:block;font-weight:600}.versus .value{font-variant-numeric:tabular-nums}
.versus .what{display:block;color:var(--muted);font-size:12px}svg.key{vertical-align:-1px;margin-right:6px}
figure.confusion-figure{flex:1 1 320px;min-width:0}table.confusion{width:auto;min-width:200px}
table.confusion th,table.confusion td{padding:6px 12px;overflow-wrap:break-word}
table.confusion thead th{max-width:10em}table.confusion tbody th{max-width:14em;background:#f3f4f6}
table.confusion td.num{min-width:3em;white-space:nowrap}table.confusion .total{color:var(--muted);background:#f9fafb}
table.confusion td.agree{font-weight:700}table.confusion td.agree:not([style]),
table.confusion td.differ:not([style]){color:var(--muted)}
table.confusion th.corner{font-weight:400;color:var(--muted);font-size:12px}.corner span{white-space:nowrap}
table.confusion tfoot th{background:#f3f4f6;font-weight:400;color:var(--muted)}
table.overview td.name{overflow-wrap:break-word;min-width:14em}
table.disagreements{table-layout:fixed;min-width:900px}table.disagreements td{overflow-wrap:anywhere}
col.c-rank{width:5.5em}col.c-trace{width:10em}col.c-span{width:10em}col.c-judge{width:6.5em}
col.c-person{width:7.5em}col.c-who{width:6.5em}
code.id{font-size:11px;padding:0 2px;background:none;color:#374151}
.verdict.pass{color:#047857}.verdict.fail{color:#b91c1c}.verdict.other{color:#92400e}
.score{font-variant-numeric:tabular-nums;white-space:nowrap}
footer{margin-top:32px;border-top:1px solid var(--line);padding-top:10px}.method{margin:0 0 4px}
@media (max-width:640px){main{padding:14px 12px 40px}.cards .card{min-width:0;flex-basis:100%}.big{font-size:26px}
table.confusion th,table.confusion td{padding:5px 8px}}
"""
