import asyncio
import socket
import time

import pytest

from spanscore.processors.judge_metrics.base import JudgeError
from spanscore.processors.judge_metrics.client import DEFAULT_MAX_TOKENS, OpenAIJudge, RetryPolicy, StructuredMode
from tests.support.judge_request import FAST_RETRY, MESSAGES, SCHEMA, answer, chat_requests
from tests.support.openai_server import Delay, ErrorReply, Reply


@pytest.fixture
def server(openai_server):
    openai_server.handler = lambda request: answer()
    return openai_server


def make(server, **kwargs) -> OpenAIJudge:
    kwargs.setdefault("retry", FAST_RETRY)
    return OpenAIJudge(model="judge-test", base_url=server.base_url, api_key="test-key", seed=3, **kwargs)


async def test_json_schema_is_asked_for_first(server):
    judge = make(server)
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.data == {"score": 0.5, "reason": "fine"}
    assert reply.calls == 1 and not reply.cached
    [request] = chat_requests(server)
    assert request.body["model"] == "judge-test"
    assert request.body["temperature"] == 0.0
    assert request.body["messages"] == MESSAGES
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "grade", "schema": SCHEMA, "strict": True},
    }
    assert request.headers["Authorization"] == "Bearer test-key"
    await judge.close()


async def test_strict_is_off_for_schemas_strict_mode_would_refuse(server):
    open_schema = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
    server.handler = lambda request: Reply(content='{"score": 1}')
    await make(server).complete(MESSAGES, open_schema, "grade")
    assert chat_requests(server)[0].body["response_format"]["json_schema"]["strict"] is False


async def test_a_llama_cpp_500_on_json_schema_falls_back_to_json_object_with_schema_and_is_remembered(server):
    server.rejected_response_formats = {"json_schema"}
    judge = make(server)
    first = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert first.data == {"score": 0.5, "reason": "fine"} and first.calls == 2
    refused, accepted = chat_requests(server)
    assert refused.body["response_format"]["type"] == "json_schema"
    assert accepted.body["response_format"] == {"type": "json_object", "schema": SCHEMA}
    # the schema is spelled out in the (first, system) message once the server stops enforcing it
    assert accepted.body["messages"][0]["role"] == "system"
    assert accepted.body["messages"][0]["content"].startswith("You grade answers.")
    assert '"minimum":0' in accepted.body["messages"][0]["content"]
    assert judge.mode is StructuredMode.JSON_OBJECT_SCHEMA

    second = await judge.complete(MESSAGES, SCHEMA, "grade_again")
    assert second.calls == 1
    assert chat_requests(server)[2].body["response_format"]["type"] == "json_object"
    # another judge for the same server and model starts from what was learned
    third = await make(server, max_concurrency=2).complete(MESSAGES, SCHEMA, "grade_third")
    assert third.calls == 1 and len(chat_requests(server)) == 4
    await judge.close()


async def test_concurrent_refusals_step_down_only_one_mode(server):
    server.rejected_response_formats = {"json_schema"}
    server.chat_latency_s = 0.05
    judge = make(server, start_concurrency=5)  # the five at once
    replies = await asyncio.gather(*(judge.complete(MESSAGES, SCHEMA, f"g{i}") for i in range(5)))
    assert all(r.calls == 2 for r in replies)
    assert judge.mode is StructuredMode.JSON_OBJECT_SCHEMA


@pytest.mark.parametrize(
    "status, message",
    [
        (400, "Invalid schema for response_format 'grade': additionalProperties is required"),
        (422, "Input should be 'text' or 'json_object' (loc: body.response_format.type)"),
        (500, "JSON schema conversion failed"),
    ],
)
async def test_rejections_that_name_the_format_are_recognised(server, status, message):
    server.rejected_response_formats = {"json_schema"}
    server.rejection_status, server.rejection_message = status, message
    reply = await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert reply.calls == 2


async def test_plain_text_with_a_fenced_answer_is_the_last_resort(server):
    server.rejected_response_formats = {"json_schema", "json_object"}
    server.handler = lambda request: Reply(
        content='Sure! Here is my grade:\n```json\n{"score": 1, "reason": "correct"}\n```\nHope it helps.'
    )
    judge = make(server)
    reply = await judge.complete([{"role": "user", "content": "Grade: 2+2=4"}], SCHEMA, "grade")
    assert reply.data == {"score": 1, "reason": "correct"}
    assert reply.calls == 4
    last = chat_requests(server)[-1].body
    assert "response_format" not in last
    assert last["messages"][0]["role"] == "system" and "JSON schema" in last["messages"][0]["content"]
    assert last["messages"][1] == {"role": "user", "content": "Grade: 2+2=4"}
    assert judge.mode is StructuredMode.TEXT


async def test_a_500_that_does_not_name_the_format_is_retried_in_the_same_mode(server):
    server.enqueue(ErrorReply(500, "upstream exploded"))
    judge = make(server)
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.calls == 2
    assert [r.body["response_format"]["type"] for r in chat_requests(server)] == ["json_schema"] * 2
    assert judge.mode is StructuredMode.JSON_SCHEMA
    assert judge.stats().retries == 1


async def test_429_waits_what_retry_after_asks(server):
    server.enqueue(ErrorReply(429, "slow down", headers={"Retry-After": "0.4"}))
    judge = make(server, retry=RetryPolicy(max_retries=2, initial_backoff_s=0.001, max_backoff_s=0.001))
    started = time.monotonic()
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert time.monotonic() - started >= 0.4
    assert reply.calls == 2


async def test_retry_after_ms_is_honoured(server):
    server.enqueue(ErrorReply(503, "busy", headers={"retry-after-ms": "300"}))
    started = time.monotonic()
    reply = await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert time.monotonic() - started >= 0.3 and reply.calls == 2


async def test_a_retry_after_beyond_the_cap_fails_at_once(server):
    server.enqueue(ErrorReply(429, "come back tomorrow", headers={"Retry-After": "86400"}))
    judge = make(server, retry=RetryPolicy(max_retries=3, max_retry_after_s=5))
    with pytest.raises(JudgeError, match="max_retry_after") as caught:
        await judge.complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == "rate_limited"
    assert len(chat_requests(server)) == 1
    assert judge.stats().failures == 1


async def test_a_slow_answer_past_the_timeout_is_retried(server):
    server.enqueue(Delay(2.0, reply=answer(0.1)))
    judge = make(server, timeout_s=0.3)
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.data["score"] == 0.5  # the retry's answer, not the late one
    assert reply.calls == 2


async def test_timeouts_are_an_outage_the_call_is_held_then_says_so(server):
    server.chat_latency_s = 2.0
    judge = make(server, timeout_s=0.2, retry=RetryPolicy(max_retries=1, initial_backoff_s=0.01), max_wait_s=0.5)
    with pytest.raises(JudgeError) as caught:
        await judge.complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == "judge_unavailable"
    assert str(caught.value) == (
        f"judge 'judge-test' at {server.base_url} unreachable for 500ms (max_judge_wait): timed out after 0.2s"
    )
    assert caught.value.calls >= 2  # held past max_retries=1: an outage is not a retry budget


async def test_a_5xx_burst_longer_than_max_retries_is_waited_out(server):
    server.enqueue(*[ErrorReply(503, "overloaded")] * 4)
    judge = make(server)  # max_retries=3: the old give-up point was the 4th failure
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.data == {"score": 0.5, "reason": "fine"} and reply.calls == 5
    assert judge.breaker.opened == 0  # 4 failures in a row: one short of opening it


async def test_retries_exhausted_raise_judge_error_with_the_last_error_type(server):
    server.enqueue(*[ErrorReply(429, "slow down")] * 4)
    judge = make(server)
    with pytest.raises(JudgeError, match="gave up after 4 requests") as caught:
        await judge.complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == "rate_limited"
    assert len(chat_requests(server)) == FAST_RETRY.max_retries + 1


@pytest.mark.parametrize(
    "status, error_type",
    [
        (400, "bad_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
    ],
)
async def test_client_errors_fail_at_once(server, status, error_type):
    server.enqueue(ErrorReply(status, "no"))
    with pytest.raises(JudgeError) as caught:
        await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == error_type
    assert len(chat_requests(server)) == 1


async def test_connection_errors_are_held_then_reported_as_the_judge_being_unreachable():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Long enough for five refusals and a probe on a loaded machine (they take ~0.2 s unloaded).
    judge = OpenAIJudge(model="m", base_url=f"http://127.0.0.1:{port}/v1", retry=FAST_RETRY, max_wait_s=2.0)
    with pytest.raises(JudgeError) as caught:
        await judge.complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == "judge_unavailable"
    assert str(caught.value) == (
        f"judge 'm' at http://127.0.0.1:{port}/v1 unreachable for 2s (max_judge_wait): connection refused"
    )
    # Five refusals open the breaker, then it probes: more requests than max_retries allows.
    assert judge.stats().requests > FAST_RETRY.max_retries + 1 and judge.breaker.opened == 1


async def test_malformed_json_is_retried(server):
    server.enqueue(Reply(content='{"score": 0.5, "reason": '))
    reply = await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert reply.data == {"score": 0.5, "reason": "fine"} and reply.calls == 2


async def test_a_score_far_out_of_range_is_rejected_and_retried(server):
    server.enqueue(answer(7.5))
    reply = await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert reply.data["score"] == 0.5 and reply.calls == 2


async def test_a_score_just_past_its_bound_is_clamped(server):
    server.enqueue(answer(1.0000001))
    reply = await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert reply.data["score"] == 1 and reply.calls == 1


async def test_answers_malformed_every_time_give_malformed_answer(server):
    server.handler = lambda request: Reply(content='{"score": "high"}')
    with pytest.raises(JudgeError, match="malformed answer") as caught:
        await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert caught.value.error_type == "malformed_answer"
    assert len(chat_requests(server)) == FAST_RETRY.max_retries + 1


async def test_a_reply_cut_off_at_max_tokens_says_so(server):
    server.handler = lambda request: Reply(content='{"score": 0.5, "rea', finish_reason="length")
    judge = make(server, max_tokens=5, retry=RetryPolicy(max_retries=0))
    with pytest.raises(JudgeError, match="cut off at max_tokens"):
        await judge.complete(MESSAGES, SCHEMA, "grade")
    assert chat_requests(server)[0].body["max_tokens"] == 5


async def test_every_request_bounds_the_answer_with_max_tokens(server):
    await make(server).complete(MESSAGES, SCHEMA, "grade")
    assert chat_requests(server)[0].body["max_tokens"] == DEFAULT_MAX_TOKENS


async def test_a_server_asking_for_max_completion_tokens_gets_it_and_it_is_remembered(server):
    # What OpenAI answers for its reasoning models.
    refusal = (
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    )
    server.handler = lambda request: (
        ErrorReply(400, refusal, error_type="invalid_request_error") if "max_tokens" in request.body else answer()
    )
    judge = make(server, max_tokens=300)
    first = await judge.complete(MESSAGES, SCHEMA, "grade")
    second = await judge.complete(MESSAGES, SCHEMA, "grade_again")
    assert first.calls == 2 and second.calls == 1
    sent = [request.body for request in chat_requests(server)]
    assert [body.get("max_tokens") for body in sent] == [300, None, None]
    assert [body.get("max_completion_tokens") for body in sent] == [None, 300, 300]


async def test_concurrency_is_capped_per_judge(server):
    server.chat_latency_s = 0.1
    judge = make(server, max_concurrency=3)
    replies = await asyncio.gather(*(judge.complete(MESSAGES, SCHEMA, f"g{i}") for i in range(10)))
    assert len(replies) == 10
    assert server.chat_peak_in_flight == 3


async def test_tokens_are_summed_over_attempts_that_reported_usage(server):
    server.rejected_response_formats = {"json_schema"}  # a refused request reports none
    server.enqueue(
        answer(7.5, prompt_tokens=100, completion_tokens=7),
        answer(0.9, include_usage=False),
        answer(0.8, prompt_tokens=120, completion_tokens=9),
    )
    judge = make(server)
    reply = await judge.complete(MESSAGES, SCHEMA, "grade")
    assert reply.data["score"] == 0.9  # the answer without usage is still a valid answer
    assert (reply.input_tokens, reply.output_tokens, reply.calls) == (100, 7, 3)
    second = await judge.complete(MESSAGES, SCHEMA, "grade_again")
    assert (second.input_tokens, second.output_tokens, second.calls) == (120, 9, 1)
    stats = judge.stats()
    assert (stats.requests, stats.completions, stats.input_tokens, stats.output_tokens) == (4, 3, 220, 16)


def test_each_event_loop_gets_its_own_client(server):
    judge = make(server)
    for _ in range(2):
        assert asyncio.run(judge.complete(MESSAGES, SCHEMA, "grade")).calls == 1


async def test_bad_schema_names_are_refused_before_any_request(server):
    with pytest.raises(ValueError, match="schema_name"):
        await make(server).complete(MESSAGES, SCHEMA, "not a name")
    assert chat_requests(server) == []
