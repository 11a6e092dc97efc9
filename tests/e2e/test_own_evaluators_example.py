"""The worked config of docs/evaluators.md, examples/own-evaluators.yaml, as a user runs
it: `spanscore score --config` on the RAG chatbot example, the judge a real loopback
server speaking the OpenAI protocol named by OPENAI_BASE_URL. Its answers come from each
request's schema: the scores show the plumbing (one call per run, per model call and per
session, each result on its span), not any judge's quality."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

from spanscore.core.attributes import attributes_to_dict
from spanscore.core.otlp_json import decode_request
from tests.support.judge_answers import schema_judge, schema_of
from tests.support.openai_server import OpenAIServer
from tests.support.processes import ROOT, SPANSCORE

CONFIG = ROOT / "examples" / "own-evaluators.yaml"
CHATBOT = ROOT / "examples" / "rag-chatbot.json"


def test_the_worked_config_judges_each_run_each_model_call_and_the_session(tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SPANSCORE_"))}
    with OpenAIServer(handler=schema_judge(score=4)) as server:
        environ |= {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key", "SPANSCORE_JUDGE_MODEL": "judge"}
        scored = tmp_path / "scored.jsonl"
        done = subprocess.run(
            [*SPANSCORE, "score", "--config", str(CONFIG), str(CHATBOT), "-o", str(scored), "--quiet"],
            capture_output=True,
            text=True,
            env=environ,
            cwd=tmp_path,
            timeout=120,
        )
        requests = server.requests_to("/chat/completions")
    assert done.returncode == 0, done.stderr
    asked = Counter(schema_of(request)[0] for request in requests)
    # Two scored runs (the chroma.add trace is no agent's), one model call each, one session.
    assert asked["refund_policy"] == 2 and asked["politeness"] == 2 and asked["resolution"] == 1, asked
    refund_prompts = [r for r in requests if schema_of(r)[0] == "refund_policy"]
    assert all("Does the reply avoid promising a refund?" in json.dumps(r.body) for r in refund_prompts)
    assert any("within 14 days of delivery for a full refund" in json.dumps(r.body) for r in refund_prompts)
    spans = [
        span
        for line in scored.read_text().splitlines()
        for rs in decode_request(line.encode()).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    by_name: dict[str, list[dict]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(attributes_to_dict(span.attributes))
    roots = by_name["shop_assistant.workflow"]
    assert len(roots) == 2
    for root in roots:
        assert root["eval.refund_policy.score"] == 1.0 and root["eval.refund_policy.evaluator"] == "judge"
        assert "eval.no_refund_promise.score" in root  # the checks score beside the judge
    # The schema judge answers 4 on the 1-5 scale: (4 - 1) / (5 - 1).
    assert [call["eval.politeness.score"] for call in by_name["openai.chat"]] == [0.75, 0.75]
    assert all(call["eval.politeness.label"] == "pass" for call in by_name["openai.chat"])  # threshold 0.5
    [carrier] = by_name["evaluate_session"]
    assert carrier["eval.resolution.category"] == "resolved" and carrier["eval.resolution.score"] == 1.0
