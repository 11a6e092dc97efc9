"""What a judge metric writes beside its score so that `spanscore agree` can read its
label against people's: the threshold, and for a metric of your own the category or the
value on its scale that the judge answered. The judge is scripted (plumbing only)."""

from __future__ import annotations

import asyncio

from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.agent_spans import make_span
from tests.support.rag_trace import ANSWER, CHAIN, LLM, QUESTION, answer, kind, traces_of
from tests.support.scripted_judge import ScriptedJudge
from tests.support.spans import request_of

JUDGE = {"model": "judge-test", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}
OFF = {name: {"enabled": False} for name in METRIC_NAMES}
ENDING = {"categories": ["resolved", "escalated"], "pass": ["resolved"]}


def context_of(metrics: dict, answers: dict, on_span: bool = False) -> dict[str, object]:
    """The attributes for the root; with `on_span`, those for the model call's span."""
    config = JudgeMetricsConfig.model_validate({"judge": JUDGE, "metrics": {**OFF, **metrics}})
    processor = JudgeMetrics("judge_metrics", config)
    processor.judge = ScriptedJudge(answers)
    root = make_span("qa", kind(CHAIN, **{"input.value": QUESTION, "output.value": ANSWER}))
    call = make_span("chat", kind(LLM, **answer(ANSWER)), parent=root, start=10, end=20)
    [trace] = traces_of(request_of([root, call]))
    outputs = asyncio.run(processor.process_trace(trace, None))
    span_id = call.span_id.hex() if on_span else None
    return {o.key: o.value for o in outputs if isinstance(o, SpanAttribute) and o.span_id == span_id}


def test_the_category_and_the_scale_value_go_beside_the_score():
    context = context_of(
        {
            "ending": {"prompt": "How did it end? {output}", "output": ENDING, "threshold": 0.6},
            "tone": {"prompt": "Tone, 1 to 5? {output}", "output": {"scale": [1, 5]}},
            "kept": {"prompt": "Kept its word? {output}", "output": "binary"},
        },
        {
            "ending": {"reason": "handed on", "category": "escalated"},
            "tone": {"reason": "fine", "score": 4},
            "kept": {"reason": "yes", "pass": True},
        },
    )
    assert context["eval.ending.category"] == "escalated" and context["eval.ending.threshold"] == 0.6
    assert (context["eval.tone.raw_score"], context["eval.tone.scale"]) == (4.0, "1-5")
    # A binary answer is its score: nothing more to keep.
    assert not any(key.startswith("eval.kept.") and key != "eval.kept.threshold" for key in context)
    assert not any(key.startswith(("eval.ending.raw", "eval.tone.category")) for key in context)


def test_a_span_level_metric_writes_it_on_the_span_it_scored_not_on_the_root():
    # The results of `on: llm` go on their spans; the root holds only their roll-up.
    metrics = {
        "tone": {"prompt": "Tone, 1 to 5? {output}", "output": {"scale": [1, 5]}, "on": "llm"},
        "ending": {"prompt": "Ended how? {output}", "output": ENDING, "on": "llm", "threshold": 0.7},
    }
    answers = {"tone": {"reason": "fine", "score": 2}, "ending": {"reason": "ok", "category": "escalated"}}
    on_call = context_of(metrics, answers, on_span=True)
    assert on_call == {
        "eval.tone.threshold": 0.5,
        "eval.tone.raw_score": 2.0,
        "eval.tone.scale": "1-5",
        "eval.ending.threshold": 0.7,
        "eval.ending.category": "escalated",
    }
    assert not any(key.startswith(("eval.tone.", "eval.ending.")) for key in context_of(metrics, answers))
