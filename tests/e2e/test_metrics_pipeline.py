"""Embedding and session metrics through the running pipeline: spans in over OTLP,
scores read back from the exported spans, equal to the Python API's results."""

from __future__ import annotations

import pytest

from spanscore.core.attributes import attributes_to_dict
from spanscore.processors.embedders.hashing import HashingEmbedder
from spanscore.processors.metrics import agent_consistency, agent_reliability, coherence, loop_detection
from tests.support.agent_session import METRICS, TURNS, send_session
from tests.support.running import sink_config, wait_until


def scores(span_) -> dict:
    attributes = attributes_to_dict(span_.attributes)
    return {key[len("eval.") :]: value for key, value in attributes.items() if key.startswith("eval.")}


@pytest.fixture
def scored_session(sink, start_collector):
    collector = start_collector(
        sink_config(
            sink,
            processors="[assembler, embedding_metrics, session_metrics]",
            extra_processors=METRICS,
            assembler="trace_wait: 50ms, session_idle: 500ms",
        )
    )
    send_session(collector)
    assert wait_until(lambda: any(s.name == "evaluate_session" for s in sink.spans()), timeout_s=10)
    roots = sorted((s for s in sink.spans() if s.name == "invoke_agent support"), key=lambda s: s.start_time_unix_nano)
    [carrier] = [s for s in sink.spans() if s.name == "evaluate_session"]
    return roots, carrier


def test_trace_scores_on_spans_equal_the_python_api(scored_session):
    roots, _ = scored_session
    embedder = HashingEmbedder()
    for i, root in enumerate(roots):
        question, answer = TURNS[i]
        got = scores(root)
        assert got["coherence.score"] == coherence(question, answer, embedder=embedder).score
        expected_loop = loop_detection(answer, [a for _, a in TURNS[:i]], embedder=embedder).score
        assert got["loop_detection.score"] == pytest.approx(expected_loop, abs=1e-6)


def test_repeated_answer_is_a_loop_by_the_seed_formula(scored_session):
    roots, _ = scored_session
    first, second, third = (scores(r) for r in roots)
    assert first["loop_detection.score"] == 1.0  # no previous trace
    assert first["loop_detection.explanation"] == "No previous trace in the session to compare with."
    # Identical text: cosine 1 x Jaccard 1 = hybrid 1, score 1 - 1 = 0.
    assert second["loop_detection.score"] == pytest.approx(0.0, abs=1e-6)
    assert second["loop_detection.label"] == "fail"
    assert third["loop_detection.label"] == "pass"


def test_session_scores_on_the_carrier_follow_the_signals_on_the_traces(scored_session):
    roots, carrier = scored_session
    got = scores(carrier)
    signals = {
        root.trace_id.hex(): {name: scores(root)[f"{name}.score"] for name in ("coherence", "loop_detection")}
        for root in roots
    }
    assert got["agent_reliability.score"] == pytest.approx(agent_reliability(signals).score, abs=1e-9)
    # By hand: the loop trace has loop risk 1 - 0 = 1, weight 1.0, so its risk is 1.0 (the
    # maximum possible); k = max(1, ceil(3 x 0.15)) = 1; raw = 0.9 x 1.0 + 0.1 x 1.0 = 1.0.
    assert got["agent_reliability.score"] == pytest.approx(0.0, abs=1e-6)
    assert got["agent_reliability.label"] == "fail"
    # No judge, so no confidence signal: consistency has nothing to evaluate.
    assert got["agent_consistency.score"] == 1.0
    assert got["agent_consistency.explanation"] == "No evaluable traces."
    assert agent_consistency(signals).score == 1.0
