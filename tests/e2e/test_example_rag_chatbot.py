"""examples/rag-chatbot.json through `spanscore score`, as the README has a user run it.

The example is a recorded shop assistant (OpenLLMetry over Chroma and the OpenAI client;
`rag_chatbot` in tests/fixtures/frameworks) asked two questions: its first answer says
14 days where the returns policy it retrieved says 30, its second says what the shipping
policy says. Scored offline with the `static` embedder, each answer's one sentence is
supported by a retrieved document or not (0 of 1, 1 of 1); the scores go on the model
call's span (faithfulness, answer_relevance) and the Chroma query's (context_relevance),
each rolled up on the workflow root, and the indexing trace (`chroma.add`) is forwarded
unscored.
"""

from __future__ import annotations

import subprocess

from spanscore.core.attributes import attributes_to_dict
from tests.fixtures.frameworks import rag_chatbot
from tests.support.doc_samples import offline_environment
from tests.support.otlp_json import read_requests
from tests.support.processes import ROOT, SPANSCORE

EXAMPLE = ROOT / "examples" / "rag-chatbot.json"


def scored_spans(tmp_path) -> list[tuple[object, dict]]:
    out = tmp_path / "rag-scored.jsonl"
    result = subprocess.run(
        [*SPANSCORE, "score", str(EXAMPLE), "-o", str(out), "--quiet"],
        cwd=tmp_path,
        env=offline_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return [
        (span, attributes_to_dict(span.attributes))
        for request in read_requests(out)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def test_the_unfaithful_answer_fails_faithfulness_on_its_model_span_and_its_root(tmp_path):
    spans = scored_spans(tmp_path)
    roots = sorted(
        (pair for pair in spans if pair[1].get("traceloop.span.kind") == "workflow"),
        key=lambda pair: pair[0].start_time_unix_nano,
    )
    assert len(roots) == len(rag_chatbot.TURNS)
    for (root, root_attributes), turn in zip(roots, rag_chatbot.TURNS):
        assert turn.question in root_attributes["traceloop.entity.input"]
        children = {s.name: a for s, a in spans if s.trace_id == root.trace_id and s.parent_span_id == root.span_id}
        assert sorted(children) == ["chroma.query", "openai.chat"]
        model, query = children["openai.chat"], children["chroma.query"]
        # One sentence per answer, supported by a retrieved document (1 of 1) or not (0 of 1):
        # a sentence with a number no document holds scores 0, a supported one its match.
        score = model["eval.faithfulness.score"]
        assert score > 0.9 if turn.faithful else score == 0.0
        assert model["eval.faithfulness.label"] == ("pass" if turn.faithful else "fail")
        supported = 1 if turn.faithful else 0
        assert model["eval.faithfulness.explanation"].startswith(f"{supported} of 1 sentences supported")
        if not turn.faithful:
            assert "not in any document: 14" in model["eval.faithfulness.explanation"]
        assert "eval.answer_relevance.score" in model and "eval.context_relevance.score" not in model
        assert "eval.context_relevance.score" in query and "eval.faithfulness.score" not in query
        # The root's roll-up: one model span, so its lowest score is that span's.
        assert root_attributes["eval.faithfulness.score"] == score
        assert (root_attributes["eval.faithfulness.spans"], root_attributes["eval.faithfulness.failing"]) == (
            1,
            0 if turn.faithful else 1,
        )
        assert root_attributes["eval.faithfulness.label"] == model["eval.faithfulness.label"]
        assert root_attributes["eval.context_relevance.score"] == query["eval.context_relevance.score"]
    [indexing] = [a for s, a in spans if s.name == "chroma.add"]
    assert not any(key.startswith("eval.") for key in indexing)
