"""People's verdicts on traces, read from a labels file: what `spanscore agree` compares
the judge with.

A labels file is JSON Lines (one object per line) or CSV (a header row, then one row per
label), told apart by its first non-blank character (`{` is JSON Lines). Its fields:

- `trace_id` (32 hex digits), `span_id` (16 hex digits, optional: without it the label is
  about the span the metric's score is on, the trace's root), `metric`;
- `label` (a class such as `pass` or `fail`, or a category of a judge metric of your own)
  and/or `score` with its `scale` (`0-1`, `1-5`, ...). Left out, the scale is the metric's
  own when its scored spans carry one (a metric of your own with `output: {scale: ...}`),
  else `0-1`: `agreement.join` settles it;
- `annotator` and `note`, optional.

Common spellings of a verdict read as `pass` or `fail` (`yes`, `true`, `1`, `correct`,
...); any other label is kept as its own class, and the label as written is kept beside
it (`text`), since a category may be spelled like a verdict. A bad row is reported with its file and
line and skipped; the other rows are read. Reading is bounded as for trace files
(`reading_bounds`): a file over MAX_DOCUMENT_BYTES is not read, and past
MAX_REPORTED_LINES bad rows of a file the rest are counted, not listed.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.offline.reading_bounds import LineProblems, read_whole

PASS, FAIL = "pass", "fail"
_PASS_SPELLINGS = frozenset({"pass", "passed", "true", "yes", "y", "1", "correct", "good", "success", "ok"})
_FAIL_SPELLINGS = frozenset({"fail", "failed", "false", "no", "n", "0", "incorrect", "bad", "failure"})
FIELDS = ("trace_id", "span_id", "metric", "label", "score", "scale", "annotator", "note")
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_SPAN_ID = re.compile(r"^[0-9a-f]{16}$")
_METRIC = re.compile(r"^[a-z][a-z0-9_]*$")
_SCALE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:-|\.\.|–|to)\s*(-?\d+(?:\.\d+)?)\s*$")
MAX_NOTE_CHARS = 2000  # a note is shown beside a disagreement, not stored in full


@dataclass(frozen=True)
class Scale:
    """The range a person's score is given on: `low` is the worst, `high` the best."""

    low: float
    high: float

    @property
    def ordinal(self) -> bool:
        """Whole points with three or more steps (1–5, 0–10): a weighted κ applies."""
        return self.low.is_integer() and self.high.is_integer() and self.high - self.low >= 2

    @property
    def points(self) -> int:
        return int(self.high - self.low) + 1

    def unit(self, score: float) -> float:
        """`score` as a share of the scale, 0 (worst) to 1 (best)."""
        return (score - self.low) / (self.high - self.low)

    def point_of_unit(self, unit: float) -> int:
        """The scale's point nearest a 0–1 score, as its index from the worst (0)."""
        return int(math.floor(unit * (self.high - self.low) + 0.5))

    def __str__(self) -> str:
        return f"{self.low:g}-{self.high:g}"


UNIT_SCALE = Scale(0.0, 1.0)


@dataclass(frozen=True)
class HumanLabel:
    """One person's verdict on one metric of one trace (or one span of it)."""

    trace_id: str
    metric: str
    span_id: str | None = None
    label: str | None = None  # a class; pass/fail spellings normalized
    score: float | None = None
    scale: Scale = UNIT_SCALE
    scale_given: bool = True  # False: the row left it out, and the metric's scale applies
    annotator: str | None = None
    note: str | None = None
    source: str = ""  # where it was read: file:line, or the Phoenix annotation
    text: str | None = None  # the label as written, before pass/fail spellings are normalized

    @property
    def unit_score(self) -> float | None:
        return None if self.score is None else self.scale.unit(self.score)

    def verdict(self, threshold: float) -> str:
        """The class compared with the judge's label: the label when given, else pass
        when the score (as a share of its scale) reaches the judge's threshold."""
        if self.label is not None:
            return self.label
        assert self.score is not None
        return PASS if self.scale.unit(self.score) >= threshold else FAIL


class LabelError(ValueError):
    """A label that cannot be used; the message says which field and why."""


def normalized_label(value: str) -> str:
    text = value.strip()
    lowered = text.lower()
    if lowered in _PASS_SPELLINGS:
        return PASS
    if lowered in _FAIL_SPELLINGS:
        return FAIL
    return text


def parse_scale(value: Any) -> Scale:
    if value is None or value == "":
        return UNIT_SCALE
    match = _SCALE.match(str(value))
    if not match:
        raise LabelError(f"scale must look like 0-1 or 1-5, got {excerpt(str(value))}")
    low, high = float(match.group(1)), float(match.group(2))
    if not high > low:
        raise LabelError(f"scale {excerpt(str(value))} must go from low to high")
    return Scale(low, high)


def make_label(fields: Mapping[str, Any], source: str) -> HumanLabel:
    """A label from one row's fields (strings from CSV, JSON values from JSON Lines)."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise LabelError(f"unknown field '{excerpt(unknown[0])}' (known: {', '.join(FIELDS)})")
    trace_id = _text(fields, "trace_id")
    if trace_id is None or not _TRACE_ID.match(trace_id.lower()):
        raise LabelError(f"trace_id must be 32 hex digits, got {excerpt(str(fields.get('trace_id')))}")
    span_id = _text(fields, "span_id")
    if span_id is not None and not _SPAN_ID.match(span_id.lower()):
        raise LabelError(f"span_id must be 16 hex digits, got {excerpt(span_id)}")
    metric = _text(fields, "metric")
    if metric is None or not _METRIC.match(metric):
        raise LabelError(f"metric must be a metric name (a-z, 0-9, _), got {excerpt(str(fields.get('metric')))}")
    label = _text(fields, "label")
    scale_given = _text(fields, "scale") is not None
    scale = parse_scale(fields.get("scale"))
    score = _score(fields.get("score"), scale if scale_given else None)
    if label is None and score is None:
        raise LabelError("give a label, a score, or both")
    note = _text(fields, "note")
    return HumanLabel(
        trace_id=trace_id.lower(),
        metric=metric,
        span_id=span_id.lower() if span_id else None,
        label=normalized_label(label) if label is not None else None,
        score=score,
        scale=scale,
        scale_given=scale_given,
        annotator=_text(fields, "annotator"),
        note=note[:MAX_NOTE_CHARS] if note else None,
        source=source,
        text=label,
    )


def on_scale(label: HumanLabel, scale: Scale | None) -> HumanLabel:
    """`label` with its score on `scale` (0-1 when None) if the row gave none; LabelError
    when the score is outside it."""
    if label.scale_given:
        return label
    scale = scale or UNIT_SCALE
    if label.score is not None and not scale.low <= label.score <= scale.high:
        whose = "the metric's scale" if scale != UNIT_SCALE else "the scale when none is given"
        raise LabelError(f"score {label.score:g} is outside {whose}, {scale}: give the row its scale")
    return replace(label, scale=scale, scale_given=True)


def _text(fields: Mapping[str, Any], key: str) -> str | None:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise LabelError(f"{key} must be a string, got {type(value).__name__}")
    text = str(value).strip()
    return text or None


def _score(value: Any, scale: Scale | None) -> float | None:
    """The score, within `scale` when given (else the metric's scale checks it at the join)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise LabelError(f"score must be a number, got {value}")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise LabelError(f"score must be a number, got {excerpt(str(value))}") from None
    if not math.isfinite(score):
        raise LabelError(f"score must be a finite number, got {score:g}")
    if scale is not None and not scale.low <= score <= scale.high:
        raise LabelError(f"score {score:g} is outside its scale {scale}")
    return score


@dataclass(frozen=True)
class _Unreadable:
    """Why the rest of a file cannot be read: listed however many bad rows came before."""

    message: str


def read_labels_file(path: Path, problems: list[str]) -> list[HumanLabel]:
    """Every usable label in `path`; bad rows are appended to `problems` as file:line."""
    text = read_whole(path, "a labels file", problems, encoding="utf-8-sig")
    if text is None:
        return []
    rows = _json_rows(text) if text.lstrip().startswith("{") else _csv_rows(text)
    labels = []
    bad = LineProblems(path, problems, "bad row")
    for line, fields in rows:
        if isinstance(fields, _Unreadable):
            problems.append(f"{path}:{line}: {fields.message}")
            break
        try:
            if isinstance(fields, str):
                raise LabelError(fields)
            labels.append(make_label(fields, f"{path}:{line}"))
        except LabelError as exc:
            bad.add(line, str(exc))
    bad.close()
    if not labels and not any(p.startswith(f"{path}:") for p in problems):
        problems.append(f"{path}: no labels in the file")
    return labels


def _json_rows(text: str) -> Iterator[tuple[int, Mapping[str, Any] | str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            yield number, f"not a JSON object: {excerpt(str(exc))}"
            continue
        except RecursionError:
            yield number, "not a JSON object: nested too deeply"
            continue
        yield number, row if isinstance(row, dict) else f"not a JSON object but {type(row).__name__}"


def _csv_rows(text: str) -> Iterable[tuple[int, Mapping[str, Any] | str | _Unreadable]]:
    reader = csv.reader(io.StringIO(text))
    try:
        yield from _csv_cells(reader)
    except csv.Error as exc:
        # A field over the csv module's limit (128 KiB), or a NUL: past it the rows cannot be told apart.
        yield reader.line_num, _Unreadable(f"{excerpt(str(exc))}: the rest of the file is not read")


def _csv_cells(reader: Any) -> Iterator[tuple[int, Mapping[str, Any] | str | _Unreadable]]:
    header: list[str] | None = None
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [cell.strip() for cell in row]
            unknown = [name for name in header if name not in FIELDS]
            if unknown or "trace_id" not in header:
                what = f"unknown column '{excerpt(unknown[0])}'" if unknown else "no trace_id column"
                yield reader.line_num, _Unreadable(f"{what}: the header names columns of {', '.join(FIELDS)}")
                return
            continue
        if len(row) > len(header):
            yield reader.line_num, f"{len(row)} cells for {len(header)} columns"
            continue
        yield reader.line_num, {name: cell for name, cell in zip(header, row) if cell.strip()}
