"""The score encoding's one home, core/score_encoding.py: what it builds reads back the
same on any span, and no other module of the package spells an `eval.` key, so a key
cannot drift between a writer and its readers."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from spanscore.core.evaluation_event import EVALUATION_EVENT, EVALUATION_NAME, evaluation_attributes, evaluation_events
from spanscore.core.provenance import Provenance
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import (
    is_result_field,
    parse_key,
    read_result,
    read_results,
    result_attributes,
    result_keys,
    usage_attributes,
    usage_keys,
)
from spanscore.core.usage import EvaluatorUsage
from spanscore.pipeline import score_wire
from tests.support.spans import kv

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

JUDGE = Provenance("gpt-4.1-mini", "0123456789ab")


def _span(pairs) -> Span:
    """A tool span (not a root), as the results of span-level metrics will be written on."""
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, parent_span_id=b"\x03" * 8, name="execute_tool search")
    span.attributes.extend(kv(key, value) for key, value in [("gen_ai.tool.name", "search"), *pairs])
    return span


def test_a_metrics_keys_are_its_name_under_eval():
    keys = result_keys("tool_correctness")
    assert (keys.score, keys.label, keys.error, keys.skipped) == (
        "eval.tool_correctness.score",
        "eval.tool_correctness.label",
        "eval.tool_correctness.error",
        "eval.tool_correctness.skipped",
    )
    assert (keys.evaluator, keys.revision, keys.threshold, keys.trial_scores) == (
        "eval.tool_correctness.evaluator",
        "eval.tool_correctness.revision",
        "eval.tool_correctness.threshold",
        "eval.tool_correctness.trial_scores",
    )
    assert keys.field("mean") == "eval.tool_correctness.mean"
    assert usage_keys("judge").input_share == "eval.judge.input_share"


def test_results_written_on_any_span_read_back_the_same():
    passed = MetricResult(name="tool_correctness", score=0.75, threshold=0.5, explanation="right tool")
    failed = MetricResult.failure("retrieval_relevance", "timed out")
    pairs = result_attributes(passed, JUDGE) + result_attributes(failed, JUDGE)
    usage = usage_attributes(EvaluatorUsage("judge", calls=2, input_tokens=300, output_tokens=40))
    results = read_results(_span([*pairs, *usage, (result_keys("tool_correctness").field("spans"), 3)]).attributes)

    assert list(results) == ["tool_correctness", "retrieval_relevance", "judge"]
    tool = results["tool_correctness"]
    assert (tool.score, tool.label, tool.explanation, tool.error) == (0.75, "pass", "right tool", None)
    assert (tool.evaluator, tool.revision, tool.get("spans")) == ("gpt-4.1-mini", "0123456789ab", 3)
    retrieval = results["retrieval_relevance"]
    assert (retrieval.score, retrieval.label, retrieval.error) == (None, None, "timed out")
    assert results["judge"].fields == {"calls": 2, "input_tokens": 300, "output_tokens": 40}


def test_a_result_is_written_in_the_documented_order():
    result = MetricResult(name="coherence", score=0.25, threshold=0.5, explanation="drifts")
    assert [key for key, _ in result_attributes(result, JUDGE)] == [
        "eval.coherence.evaluator",
        "eval.coherence.revision",
        "eval.coherence.score",
        "eval.coherence.label",
        "eval.coherence.explanation",
    ]


def test_one_metric_is_read_with_its_own_fields_only():
    span = _span([("eval.failure_localization.errors.planning", 1), ("eval.failure_localization_x.score", 0.5)])
    localization = read_result(span.attributes, "failure_localization")
    assert localization is not None and localization.fields == {"errors.planning": 1}
    assert read_result(span.attributes, "coherence") is None


def test_keys_without_a_field_are_not_a_metrics():
    assert parse_key("eval.case.id") == ("case", "id")
    assert parse_key("eval.failure_localization.errors.planning") == ("failure_localization", "errors.planning")
    assert [parse_key(key) for key in ("eval.route", "eval..score", "gen_ai.evaluation.name")] == [None] * 3
    assert read_results(_span([("eval.route", "keep"), ("eval.evaluator", "code")]).attributes) == {}


def test_a_results_own_fields_are_told_from_a_processors_attributes():
    assert is_result_field("eval.coherence.score") and is_result_field("eval.coherence.revision")
    assert not is_result_field("eval.case.id") and not is_result_field("eval.coherence.threshold")


def test_an_evaluation_event_reads_back_as_built():
    result = MetricResult(name="tool_correctness", score=0.25, threshold=0.5, explanation="wrong tool")
    span = _span([])
    span.MergeFromString(score_wire.span_event(1, EVALUATION_EVENT, evaluation_attributes(result, JUDGE).items()))
    span.events.add(name="exception")
    [event] = evaluation_events(span)
    assert event.name == "tool_correctness" and event.get(EVALUATION_NAME) == "tool_correctness"
    assert event.attributes == evaluation_attributes(result, JUDGE)


ENCODING_MODULE = ROOT / "core" / "score_encoding.py"
# A string that is, or begins, an `eval.` key (`"eval."`, `"eval.case.id"`, `f"eval.{metric}.score"`).
KEY_LITERAL = re.compile(r"^eval(\.|$)")


def key_literals(source: str) -> list[str]:
    """`line: text` of each string constant or f-string in `source` that begins an `eval.` key."""
    tree = ast.parse(source)
    parts = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    found = []
    for node in ast.walk(tree):
        head = node.values[0] if isinstance(node, ast.JoinedStr) and node.values else node
        if id(node) in parts or not (isinstance(head, ast.Constant) and isinstance(head.value, str)):
            continue
        if KEY_LITERAL.match(head.value):
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_eval_keys_are_spelled_only_in_the_encoding_module():
    folders = {ROOT / folder for folder in PACKAGE_DIRS.values()} | {ROOT / "bench"}
    files = sorted(path for folder in folders for path in folder.rglob("*.py"))
    assert ENCODING_MODULE in files and len(files) > 100
    spelled = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in files
        if path != ENCODING_MODULE
        for hit in key_literals(path.read_text())
    ]
    assert spelled == [], "build or read these keys through spanscore.core.score_encoding:\n" + "\n".join(spelled)


def test_the_scan_finds_key_literals():
    source = 'A = "eval.case.id"\nB = f"eval.{name}.score"\nC = key.startswith("eval.")\nD = "not eval.x"\nE = "eval"\n'
    assert key_literals(source) == ["1: 'eval.case.id'", "2: f'eval.{name}.score'", "3: 'eval.'", "5: 'eval'"]
