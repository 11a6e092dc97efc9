"""The failure_localization processor: when it runs, and what it returns for the root."""

from __future__ import annotations

import asyncio
import json

from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.span_finding import SpanFinding
from spanscore.core.trace import ScopeOrigin, Trace
from spanscore.processors.failure_localization import FailureLocalization, FailureLocalizationConfig
from tests.support.agent_spans import TRACE_ID, make_span
from tests.support.spans import request_of

ROOT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]),
    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hello"}]}]),
}


def _trace(*spans, results=()) -> Trace:
    trace = Trace(TRACE_ID, 0.0)
    request = request_of(list(spans))
    resource_spans = request.resource_spans[0]
    origin = ScopeOrigin(resource_spans, resource_spans.scope_spans[0])
    for position, one in enumerate(resource_spans.scope_spans[0].spans):
        trace.add(position, one, origin)
    trace.results = list(results)
    return trace


def _clean_run(results=()) -> Trace:
    root = make_span("agent", ROOT, id=b"\x00" * 7 + b"\x01", start=0, end=1_000)
    chat = make_span("chat", {"gen_ai.operation.name": "chat"}, id=b"\x00" * 7 + b"\x02", parent=root, start=10)
    return _trace(root, chat, results=results)


def _score(config: dict, trace: Trace):
    processor = FailureLocalization("failure_localization", FailureLocalizationConfig(**config))
    return asyncio.run(processor.process_trace(trace, None))


def test_a_run_nothing_says_failed_gets_nothing():
    passed = MetricResult(name="coherence", score=0.9)
    assert _score({}, _clean_run([passed])) == []


def test_a_run_an_earlier_metric_failed_is_localized_and_says_why():
    failed = MetricResult(name="coherence", score=0.31)
    outputs = _score({}, _clean_run([failed]))
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    assert (result.score, result.label) == (1.0, "none_found")
    assert result.explanation.startswith("the run failed (coherence 0.31 < 0.50); no span states an error; ")
    attributes = {o.key: o.value for o in outputs if isinstance(o, SpanAttribute)}
    assert attributes == {
        "eval.failure_localization.errors": 0,
        "eval.failure_localization.errors.reasoning": 0,
        "eval.failure_localization.errors.system_execution": 0,
        "eval.failure_localization.errors.planning_coordination": 0,
    }
    assert not [o for o in outputs if isinstance(o, SpanFinding)]


def test_when_always_runs_on_a_run_that_passed():
    [result] = [o for o in _score({"when": "always"}, _clean_run()) if isinstance(o, MetricResult)]
    assert result.explanation.startswith("the run did not fail; no span states an error; ")


def test_off_scores_nothing_and_declares_no_metric():
    processor = FailureLocalization("failure_localization", FailureLocalizationConfig(enabled=False))
    assert processor.metric_names == ()


def test_at_most_max_errors_spans_are_blamed_the_first_ones():
    root = make_span("agent", ROOT, id=(1).to_bytes(8, "big"), start=0, end=10_000)
    tools = [
        make_span(
            f"execute_tool t{i}",
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{i}", "gen_ai.tool.call.arguments": "{}"},
            id=(10 + i).to_bytes(8, "big"),
            parent=root,
            start=100 * (i + 1),
            error="503 Service Unavailable",
        )
        for i in range(5)
    ]
    outputs = _score({"max_errors": 2}, _trace(root, *tools))
    findings = [o for o in outputs if isinstance(o, SpanFinding)]
    assert [f.span_id for f in findings] == [(10).to_bytes(8, "big"), (11).to_bytes(8, "big")]
    [result] = [o for o in outputs if isinstance(o, MetricResult)]
    # Five tool steps; the first error is on the first: nothing of the run came before it.
    assert (result.score, result.label) == (0.0, "service_error")
    ids = next(o.value for o in outputs if isinstance(o, SpanAttribute) and o.key.endswith(".span_ids"))
    assert ids == "000000000000000a,000000000000000b"
