"""Scored files and labels files for `spanscore agree` tests: spans carrying a metric's
score attributes as the pipeline writes them, and labels about them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from spanscore.core.otlp_json import encode_request
from tests.support.spans import new_span_id, request_of, span


def scored_root(
    trace_id: str,
    metric: str,
    score: float,
    *,
    threshold: float | None = 0.5,
    evaluator: str = "judge-model",
    revision: str = "aaaaaaaaaaaa",
    explanation: str = "",
    trial_scores: str | None = None,
    span_id: str | None = None,
    name: str = "invoke_agent helper",
):
    """A root span with `metric`'s score, label (cut at `threshold`, 0.5 when None),
    evaluator, revision and the judge's extra attributes."""
    cut = 0.5 if threshold is None else threshold
    attributes = {
        f"eval.{metric}.evaluator": evaluator,
        f"eval.{metric}.revision": revision,
        f"eval.{metric}.score": float(score),
        f"eval.{metric}.label": "pass" if score >= cut else "fail",
    }
    if explanation:
        attributes[f"eval.{metric}.explanation"] = explanation
    if threshold is not None:
        attributes[f"eval.{metric}.threshold"] = float(threshold)
    if trial_scores is not None:
        attributes[f"eval.{metric}.trial_scores"] = trial_scores
    return span(
        bytes.fromhex(trace_id),
        name,
        attributes=attributes,
        span_id=bytes.fromhex(span_id) if span_id else new_span_id(),
    )


def write_scored(path: Path, spans: Iterable) -> Path:
    """One export request per span, one per line, as the file exporter writes."""
    path.write_text("".join(encode_request(request_of([s])) + "\n" for s in spans), encoding="utf-8")
    return path


def write_labels(path: Path, rows: Iterable[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def trace_id(n: int) -> str:
    return f"{n:032x}"
