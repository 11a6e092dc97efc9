"""Span-level results sorted from a trace's own, and their roll-up on the root."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_rollup import UNKNOWN_SPAN, sort_results

A, B, C = "00000000000000a1", "00000000000000b2", "00000000000000c3"


def on(span_id: str, score: float | None = None, error: str | None = None, name: str = "faith") -> MetricResult:
    return MetricResult(name=name, score=score, error=error, threshold=0.6, span_id=span_id)


def fields(sorted_results) -> dict:
    return {attribute.key: attribute.value for attribute in sorted_results.rollup_fields}


def test_a_span_id_is_sixteen_lowercase_hex_digits():
    assert MetricResult(name="faith", score=1.0).span_id is None
    for wrong in ("A" * 16, "abc", "0" * 17, "g" * 16):
        with pytest.raises(ValidationError):
            MetricResult(name="faith", score=1.0, span_id=wrong)


def test_the_root_gets_the_lowest_score_failing_when_any_span_failed():
    trace_level = MetricResult(name="toy", score=0.9)
    sorted_results = sort_results([trace_level, on(A, 0.9), on(B, 0.4), on(C, 0.8)], {A, B, C})
    assert [r.span_id for r in sorted_results.spans] == [A, B, C]
    toy, rollup = sorted_results.trace
    assert toy is trace_level
    assert (rollup.name, rollup.score, rollup.label, rollup.span_id) == ("faith", 0.4, "fail", None)
    assert rollup.explanation == f"1 of 3 spans failing; lowest 0.40 on span {B}"
    assert fields(sorted_results) == {
        "eval.faith.spans": 3,
        "eval.faith.min": 0.4,
        "eval.faith.mean": pytest.approx(0.7),
        "eval.faith.failing": 1,
    }


def test_every_span_passing_passes():
    [rollup] = sort_results([on(A, 0.6), on(B, 1.0)], {A, B}).trace
    assert rollup.label == "pass" and rollup.score == 0.6


def test_spans_that_could_not_be_scored_are_counted_beside_the_scored_ones():
    sorted_results = sort_results([on(A, 0.7), on(B, error="judge down")], {A, B})
    [rollup] = sorted_results.trace
    assert rollup.score == 0.7 and rollup.explanation.endswith("; 1 could not be scored")
    assert fields(sorted_results)["eval.faith.errors"] == 1 and fields(sorted_results)["eval.faith.spans"] == 2


def test_no_span_scored_is_an_error_quoting_the_first():
    sorted_results = sort_results([on(A, error="judge down"), on(B, error="timeout")], {A, B})
    [rollup] = sorted_results.trace
    assert rollup.score is None and rollup.error == "none of its 2 spans could be scored; the first said: judge down"
    assert fields(sorted_results) == {"eval.faith.spans": 2, "eval.faith.errors": 2}


def test_results_naming_spans_the_trace_lacks_make_the_root_an_error_quoting_a_few():
    unknown = [f"{i:016x}" for i in range(1, 6)]
    sorted_results = sort_results([on(A, 0.9), *(on(span_id, 0.5) for span_id in unknown)], {A})
    [rollup] = sorted_results.trace
    assert rollup.error_type == UNKNOWN_SPAN and rollup.score is None
    assert rollup.error == (
        "5 of its 6 span-level results name spans not in the trace: "
        "0000000000000001, 0000000000000002, 0000000000000003 and 2 more"
    )
    assert [r.span_id for r in sorted_results.spans] == [A] and not sorted_results.rollup_fields


def test_a_metric_scored_on_the_trace_too_keeps_that_result_with_the_roll_ups_fields_beside_it():
    own = MetricResult(name="faith", score=0.95)
    sorted_results = sort_results([own, on(A, 0.2)], {A})
    assert sorted_results.trace == [own]
    assert SpanAttribute("eval.faith.failing", 1) in sorted_results.rollup_fields


def test_metrics_roll_up_separately_in_the_order_first_seen():
    sorted_results = sort_results([on(A, 0.2, name="zeta"), on(A, 0.9), on(B, 0.1, name="zeta")], {A, B})
    assert [(r.name, r.score) for r in sorted_results.trace] == [("zeta", 0.1), ("faith", 0.9)]
