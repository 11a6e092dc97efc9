"""`spanscore agree`'s printout and its gate, from the results `offline.agreement` computes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.core.wording import counted
from spanscore.offline.agreement_stats import CONFIDENCE, MIN_TRACES_FOR_BCA

SHOWN_DISAGREEMENTS = 20
QUOTE_CHARS = 120


def method(resamples: int, seed: int) -> str:
    return (
        f"{CONFIDENCE:.0%} intervals: BCa bootstrap over traces, percentile under {MIN_TRACES_FOR_BCA} traces "
        f"({resamples:,} resamples of the traces, with replacement; numpy PCG64, seed {seed})"
    )


def number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def with_interval(stat: dict[str, float | None] | None) -> str:
    if stat is None or stat["estimate"] is None:
        return "n/a"
    if stat["low"] is None:
        return number(stat["estimate"])
    return f"{number(stat['estimate'])} [{number(stat['low'])}, {number(stat['high'])}]"


def heading(result: dict[str, Any]) -> str:
    # The evaluator and revision are what the spans said: a client's text, quoted.
    revision = f" · revision {excerpt(result['revision'], 40)}" if result["revision"] else ""
    items = counted(result["n"], "label")
    evaluator = excerpt(result["evaluator"], 80)
    return f"{result['metric']} · {evaluator}{revision} · {items} on {counted(result['traces'], 'trace')}"


def text(results: Sequence[dict[str, Any]], resamples: int, seed: int) -> str:
    blocks = [_block(result) for result in results]
    return "\n\n".join([*blocks, method(resamples, seed)])


def _block(result: dict[str, Any]) -> str:
    lines = [heading(result)]
    lines.append(f"  κ {with_interval(result['kappa'])}  ({result['kappa_kind']})")
    lines.append(f"  accuracy {with_interval(result['accuracy'])}")
    lines.append(
        f"  {result['failing'].removeprefix('the ')}: precision {with_interval(result['precision'])}, recall "
        f"{with_interval(result['recall'])}, F1 {with_interval(result['f1'])}"
    )
    if result["spearman"] is not None:
        lines.append(f"  Spearman's ρ {with_interval(result['spearman'])}")
    human = result["human_kappa"]
    if human is None:
        lines.append("  people with each other: no item was labelled by two people")
    else:
        lines.append(
            f"  people with each other: κ {with_interval(human)} on {counted(human['items'], 'item')} "
            f"labelled twice or more ({counted(human['pairs'], 'pair')} of people)"
        )
    consistency = result["consistency"]
    if consistency is not None:
        lines.append(
            f"  judge with itself: {consistency['trials']:g} trials on {counted(consistency['items'], 'item')}, "
            f"mean spread (stdev) {number(consistency['mean_stdev'])}, largest {number(consistency['max_stdev'])}; "
            f"trials split pass/fail on {consistency['split_rate']:.0%} of items"
        )
    lines.append("  " + _threshold_line(result["best_threshold"]))
    lines.extend("  " + line for line in _table_lines(result["confusion"], "people", "judge"))
    if result["scale_confusion"] is not None:
        lines.extend(
            "  " + line for line in _table_lines(result["scale_confusion"], f"people ({result['scale']})", "judge")
        )
    lines.extend(_disagreement_lines(result["disagreements"]))
    return "\n".join(lines)


def _threshold_line(best: dict[str, Any] | None) -> str:
    if best is None:
        return "threshold: none to fit (no pass/fail labels, or the judge gave a single score)"
    configured = (
        f"configured {number(best['configured'])} (κ {number(best['kappa_at_configured'])})"
        if best["configured"] is not None
        else "configured threshold not on the spans"
    )
    if best["estimate"] is None:
        return f"threshold: {configured}; no cut tells the labels apart (people used one class)"
    return (
        f"threshold: {configured}; best match with people {with_interval(best)} "
        f"(κ {number(best['kappa'])}, pass when score >= it)"
    )


def _table_lines(confusion: dict[str, dict[str, int]], rows_are: str, columns_are: str) -> list[str]:
    columns = list(next(iter(confusion.values()), {}))
    width = max([len(c) for c in columns] + [len(r) for r in confusion] + [5])
    lines = [f"{rows_are} (rows) by {columns_are} (columns):"]
    lines.append(" " * (width + 2) + "".join(f"{excerpt(c):>{width + 2}}" for c in columns))
    for row, cells in confusion.items():
        lines.append(f"  {excerpt(row):<{width}}" + "".join(f"{cells[c]:>{width + 2}}" for c in columns))
    return lines


def _disagreement_lines(disagreements: Sequence[dict[str, Any]]) -> list[str]:
    if not disagreements:
        return ["  no disagreements"]
    shown = disagreements[:SHOWN_DISAGREEMENTS]
    lines = [f"  disagreements, farthest apart first ({len(shown)} of {len(disagreements)}; all in --json):"]
    for d in shown:
        person = (
            d["human_label"]
            if d["human_score"] is None
            else f"{d['human_label']} ({d['human_score']:g} on {d['human_scale']})"
        )
        who = f" by {excerpt(d['annotator'], 40)}" if d["annotator"] else ""
        lines.append(
            f"    trace {d['trace_id']} span {excerpt(d['span_name'], 40)} ({d['span_id']}): "
            f"judge {d['judge_score']:.2f} {d['judge_label']}, person {excerpt(person, 40)}{who}"
        )
        if d["judge_explanation"]:
            lines.append(f"      judge: {excerpt(d['judge_explanation'], QUOTE_CHARS)}")
        if d["note"]:
            lines.append(f"      person: {excerpt(d['note'], QUOTE_CHARS)}")
    return lines


def gate_failures(results: Sequence[dict[str, Any]], min_kappa: float) -> list[str]:
    """One line per group whose κ interval's lower bound is below `min_kappa` (or undefined)."""
    failures = []
    for result in results:
        low = result["kappa"]["low"]
        if low is None or low < min_kappa:
            shown = "undefined" if low is None else f"{low:.3f}"
            failures.append(f"{heading(result)}: κ lower bound {shown} is below {min_kappa:g}")
    return failures
