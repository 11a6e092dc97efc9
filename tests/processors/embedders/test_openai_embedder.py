import asyncio
import math
import threading
import time

import numpy as np
import pytest

from spanscore.core.redaction import Redaction
from spanscore.processors.embedders.config import build_uncached, parse_embedder_config
from spanscore.processors.embedders.openai_embedder import (
    EmbeddingRequestError,
    MissingAPIKeyError,
    OpenAIEmbedder,
    RetryPolicy,
)
from tests.support.openai_server import Delay, ErrorReply, OpenAIServer, _embedding
from tests.support.ports import free_port

FAST_RETRY = RetryPolicy(max_retries=3, initial_backoff_s=0.01, max_backoff_s=0.05)


def make(server, **kwargs) -> OpenAIEmbedder:
    kwargs.setdefault("retry", FAST_RETRY)
    return OpenAIEmbedder(base_url=server.base_url, api_key="test-key", seed=7, **kwargs)


def expected(texts, dimensions=8) -> np.ndarray:
    return np.array([_embedding(t, dimensions) for t in texts], dtype=np.float32)


def sent_batches(server) -> list[list[str]]:
    return [r.body["input"] for r in server.requests_to("/embeddings")]


async def test_texts_are_sent_in_batches_of_batch_size(openai_server):
    embedder = make(openai_server, batch_size=4)
    texts = [f"text {i}" for i in range(10)]
    vectors = await embedder.embed(texts)
    batches = sent_batches(openai_server)
    assert len(batches) == math.ceil(10 / 4)
    assert sorted(t for batch in batches for t in batch) == sorted(texts)
    assert all(len(batch) <= 4 for batch in batches)
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)
    await embedder.close()


def test_embed_sync_batches_the_same_way(openai_server):
    embedder = make(openai_server, batch_size=3)
    texts = [f"text {i}" for i in range(7)]
    vectors = embedder.embed_sync(texts)
    assert len(sent_batches(openai_server)) == 3
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)


async def test_rows_are_put_back_in_input_order_by_index(openai_server):
    openai_server.embeddings_reversed = True
    embedder = make(openai_server, batch_size=5)
    texts = [f"sentence {i}" for i in range(12)]
    vectors = await embedder.embed(texts)
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)
    np.testing.assert_allclose(embedder.embed_sync(texts), expected(texts), atol=1e-6)
    await embedder.close()


async def test_rows_are_unit_length_float32(openai_server):
    vectors = await make(openai_server).embed(["one", "two"])
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


async def test_dimensions_are_requested_when_configured(openai_server):
    vectors = await make(openai_server, dimensions=16).embed(["one"])
    assert vectors.shape == (1, 16)
    assert openai_server.requests_to("/embeddings")[0].body["dimensions"] == 16


async def test_empty_texts_are_never_sent_and_give_zero_rows(openai_server):
    embedder = make(openai_server)
    vectors = await embedder.embed(["", "hello", "   ", "world"])
    assert sent_batches(openai_server) == [["hello", "world"]]
    assert not vectors[0].any() and not vectors[2].any()
    np.testing.assert_allclose(vectors[[1, 3]], expected(["hello", "world"]), atol=1e-6)


async def test_all_empty_texts_make_no_request_once_the_width_is_known(openai_server):
    embedder = make(openai_server, dimensions=8)
    vectors = await embedder.embed(["", " "])
    assert vectors.shape == (2, 8) and not vectors.any()
    assert openai_server.requests_to("/embeddings") == []


def test_all_empty_texts_with_unknown_width_probe_once(openai_server):
    embedder = make(openai_server)
    assert embedder.embed_sync([""]).shape == (1, 8)
    assert embedder.embed_sync(["", ""]).shape == (2, 8)
    assert len(openai_server.requests_to("/embeddings")) == 1


async def test_429_with_retry_after_is_honoured_then_succeeds(openai_server):
    openai_server.enqueue_embeddings(ErrorReply(429, "slow down", headers={"Retry-After": "1"}))
    embedder = make(openai_server)
    started = time.perf_counter()
    vectors = await embedder.embed(["hello"])
    elapsed = time.perf_counter() - started
    assert 1.0 <= elapsed < 2.0
    assert len(openai_server.requests_to("/embeddings")) == 2
    np.testing.assert_allclose(vectors, expected(["hello"]), atol=1e-6)
    await embedder.close()


def test_retry_after_ms_is_honoured_by_embed_sync(openai_server):
    openai_server.enqueue_embeddings(ErrorReply(429, headers={"retry-after-ms": "400"}))
    started = time.perf_counter()
    make(openai_server).embed_sync(["hello"])
    assert 0.4 <= time.perf_counter() - started < 1.4


async def test_500_then_success(openai_server):
    openai_server.enqueue_embeddings(ErrorReply(500), ErrorReply(503))
    embedder = make(openai_server)
    vectors = await embedder.embed(["hello"])
    assert embedder.requests_made == 3
    np.testing.assert_allclose(vectors, expected(["hello"]), atol=1e-6)


async def test_a_timeout_is_retried(openai_server):
    openai_server.enqueue_embeddings(Delay(1.5))
    embedder = make(openai_server, timeout_s=0.3)
    vectors = await embedder.embed(["hello"])
    assert embedder.requests_made == 2
    np.testing.assert_allclose(vectors, expected(["hello"]), atol=1e-6)
    await embedder.close()


async def test_exhausted_retries_raise_a_clear_error(openai_server):
    openai_server.enqueue_embeddings(*[ErrorReply(429, "slow down")] * 4)
    embedder = make(openai_server)
    with pytest.raises(EmbeddingRequestError, match=r"gave up after 4 attempts.*HTTP 429") as caught:
        await embedder.embed(["hello"])
    assert caught.value.attempts == 4 and caught.value.status == 429
    assert len(openai_server.requests_to("/embeddings")) == 4


def test_exhausted_retries_raise_from_embed_sync_too(openai_server):
    openai_server.enqueue_embeddings(*[ErrorReply(429)] * 2)
    embedder = make(openai_server, retry=RetryPolicy(max_retries=1, initial_backoff_s=0.01))
    with pytest.raises(EmbeddingRequestError, match="gave up after 2 attempts") as caught:
        embedder.embed_sync(["hello"])
    assert caught.value.status == 429


async def test_a_5xx_burst_longer_than_max_retries_is_waited_out(openai_server):
    openai_server.enqueue_embeddings(*[ErrorReply(500, "boom")] * 4)
    embedder = make(openai_server)  # max_retries=3: the old give-up point was the 4th failure
    vectors = await embedder.embed(["hello"])
    assert embedder.requests_made == 5 and embedder.breaker.opened == 0
    np.testing.assert_allclose(vectors, expected(["hello"]), atol=1e-6)


async def test_client_errors_are_not_retried(openai_server):
    openai_server.enqueue_embeddings(ErrorReply(400, "bad input", error_type="invalid_request_error"))
    with pytest.raises(EmbeddingRequestError, match="not retryable.*HTTP 400") as caught:
        await make(openai_server).embed(["hello"])
    assert caught.value.attempts == 1
    assert len(openai_server.requests_to("/embeddings")) == 1


async def test_a_retry_after_beyond_the_limit_fails_at_once(openai_server):
    openai_server.enqueue_embeddings(ErrorReply(429, headers={"Retry-After": "3600"}))
    embedder = make(openai_server, retry=RetryPolicy(max_retry_after_s=10))
    started = time.perf_counter()
    with pytest.raises(EmbeddingRequestError, match="Retry-After exceeds"):
        await embedder.embed(["hello"])
    assert time.perf_counter() - started < 1.0


async def test_concurrent_requests_are_capped(openai_server):
    openai_server.embeddings_latency_s = 0.2
    embedder = make(openai_server, batch_size=1, max_concurrency=2)
    await embedder.embed([f"text {i}" for i in range(8)])
    assert len(openai_server.requests_to("/embeddings")) == 8
    assert openai_server.embeddings_peak_in_flight == 2
    await embedder.close()


async def test_the_cap_holds_across_concurrent_embed_calls(openai_server):
    openai_server.embeddings_latency_s = 0.1
    embedder = make(openai_server, batch_size=2, max_concurrency=3)
    await asyncio.gather(*(embedder.embed([f"call {c} text {i}" for i in range(4)]) for c in range(5)))
    assert openai_server.embeddings_peak_in_flight == 3
    await embedder.close()


def test_embed_sync_caps_concurrency_with_threads(openai_server):
    openai_server.embeddings_latency_s = 0.2
    embedder = make(openai_server, batch_size=1, max_concurrency=3)
    started = time.perf_counter()
    embedder.embed_sync([f"text {i}" for i in range(6)])
    assert openai_server.embeddings_peak_in_flight == 3
    assert time.perf_counter() - started < 1.0  # two waves of 0.2 s, not six


def test_the_embedder_serves_several_event_loops(openai_server):
    embedder = make(openai_server)
    results = []

    def in_thread():
        results.append(asyncio.run(embedder.embed(["from a thread"])))

    first = asyncio.run(embedder.embed(["from main"]))
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    second = asyncio.run(embedder.embed(["from main"]))
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(results[0], expected(["from a thread"]), atol=1e-6)


def test_a_missing_api_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1/v1")


def test_the_api_key_comes_from_the_environment(monkeypatch, openai_server):
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    OpenAIEmbedder(base_url=openai_server.base_url).embed_sync(["hello"])
    assert openai_server.requests[0].headers["Authorization"] == "Bearer from-env"


def test_the_name_carries_model_and_dimensions(openai_server):
    assert make(openai_server).name == "openai/text-embedding-3-small"
    assert make(openai_server, model="m", dimensions=64).name == "openai/m/d64"


async def test_an_embedder_down_then_back_is_waited_for_not_failed():
    server = OpenAIServer(port=free_port())  # not started: connections are refused
    embedder = OpenAIEmbedder(
        base_url=server.base_url,
        api_key="test-key",
        seed=7,
        max_wait_s=10.0,
        retry=RetryPolicy(max_retries=1, initial_backoff_s=0.05, max_backoff_s=0.2),
    )
    call = asyncio.create_task(embedder.embed(["hello", "world"]))
    try:
        await asyncio.sleep(1.0)
        assert not call.done() and embedder.breaker.opened == 1
        await asyncio.to_thread(server.start)
        vectors = await asyncio.wait_for(call, 5)
    finally:
        await asyncio.to_thread(server.stop)
    np.testing.assert_allclose(vectors, expected(["hello", "world"]), atol=1e-6)
    assert len(server.requests_to("/embeddings")) == 1  # refused attempts never reached it


def test_past_max_embedder_wait_the_error_says_how_long_and_why():
    port = free_port()
    embedder = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="test-key", max_wait_s=0.3, retry=FAST_RETRY
    )
    with pytest.raises(EmbeddingRequestError) as caught:
        embedder.embed_sync(["hello"])
    assert str(caught.value) == (
        f"embedding 1 text: embedder 'text-embedding-3-small' at http://127.0.0.1:{port}/v1 "
        "unreachable for 300ms (max_embedder_wait): connection refused"
    )


async def test_texts_leave_redacted_unless_redaction_is_off(openai_server):
    secret = "the agent called the API with sk-proj-abcdefghijklmnopqrstuvwx1234 for ann@example.com"
    await make(openai_server).embed([secret])
    [[sent]] = sent_batches(openai_server)
    assert "sk-proj-" not in sent and "ann@example.com" not in sent
    assert "[redacted api key]" in sent and "[redacted email]" in sent
    await make(openai_server, redaction=Redaction(builtin=False)).embed([secret])
    assert sent_batches(openai_server)[-1] == [secret]


def test_the_redact_setting_reaches_the_embedder():
    built = build_uncached(
        parse_embedder_config({"type": "openai", "api_key": "k", "redact": {"patterns": ["order-\\d+"]}})
    )
    assert built.redaction.text("see order-42") == "see [REDACTED]"
    assert not build_uncached(
        parse_embedder_config({"type": "openai", "api_key": "k", "redact": False})
    ).redaction.enabled
