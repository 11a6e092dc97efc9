"""The OpenAI embedder against servers that answer badly: tens of megabytes, a body
trickled a byte at a time, an HTML page with status 200, JSON that is not an embeddings
response. Each is a real loopback server; both the async and the sync path are tried."""

from __future__ import annotations

import base64
import json
import time
import tracemalloc

import numpy as np
import pytest

from spanscore.processors.embedders.openai_embedder import (
    MAX_ANSWER_BYTES_PER_TEXT,
    EmbeddingRequestError,
    OpenAIEmbedder,
    RetryPolicy,
)
from tests.support.hostile_http import HostileServer, answer, answer_json, huge, trickle

NO_RETRY = RetryPolicy(max_retries=0, initial_backoff_s=0.01, max_backoff_s=0.05)
PROXY_KEY = "sk-proj-" + "Q7w8E9r0" * 4  # a proxy's page may echo the request's headers
HTML = f"<html><title>502 Bad Gateway</title><body>\x1b[31mkey: {PROXY_KEY}</body></html>".encode()


def embedder_at(server: HostileServer, **kwargs) -> OpenAIEmbedder:
    kwargs.setdefault("retry", NO_RETRY)
    kwargs.setdefault("max_wait_s", 0.3)
    return OpenAIEmbedder(base_url=f"{server.url}/v1", api_key="test-key", seed=1, **kwargs)


def vector(values: list[float]) -> str:
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()


def embeddings(*vectors: object) -> dict:
    return {"object": "list", "data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}


async def embed(embedder: OpenAIEmbedder, texts: list[str], sync: bool) -> np.ndarray:
    if sync:
        return embedder.embed_sync(texts)
    try:
        return await embedder.embed(texts)
    finally:
        await embedder.close()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_answer_past_the_size_bound_is_refused_without_holding_it(sync):
    # 40 MB of floats for one text: a server gone wrong, or one that means harm
    head, tail = b'{"data": [{"index": 0, "embedding": [0.1', b"]}]}"
    with HostileServer(lambda request: huge(request, head, b", 0.1" * 200, 40 << 20, tail)) as server:
        embedder = embedder_at(server)
        tracemalloc.start()
        try:
            with pytest.raises(EmbeddingRequestError) as caught:
                await embed(embedder, ["hello"], sync)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert f"answer larger than {MAX_ANSWER_BYTES_PER_TEXT:,} bytes" in str(caught.value)
    assert peak < 3 * MAX_ANSWER_BYTES_PER_TEXT + (4 << 20), peak


async def test_the_size_bound_grows_with_the_batch():
    # 4,096 dimensions as JSON floats for each of 3 texts: about 100 kB a text, all read
    row = [round(0.001 * i, 6) for i in range(4096)]
    with HostileServer(lambda request: answer_json(request, embeddings(row, row, row))) as server:
        vectors = await embed(embedder_at(server), ["a", "b", "c"], sync=False)
    assert vectors.shape == (3, 4096)


def test_a_trickled_answer_stops_the_sync_path_after_timeout_not_after_the_whole_trickle():
    body = json.dumps(embeddings(vector([1.0, 0.0]))).encode()  # about 70 bytes: 7 s at 0.1 s a byte
    with HostileServer(lambda request: trickle(request, body, every_s=0.1)) as server:
        embedder = embedder_at(server, timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(EmbeddingRequestError, match="timed out after 1s") as caught:
            embedder.embed_sync(["hello"])
        elapsed = time.monotonic() - started
    # each request is cut at about `timeout` (plus one read); the breaker's wait ends the call
    assert caught.value.attempts <= 3
    assert elapsed < 4.0, elapsed


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_html_page_with_status_200_is_an_outage_with_a_bounded_escaped_message(sync):
    respond = lambda request: answer(request, 200, HTML * 50, content_type="text/html")  # noqa: E731
    with HostileServer(respond) as server:
        embedder = embedder_at(server)
        with pytest.raises(EmbeddingRequestError) as caught:
            await embed(embedder, ["hello"], sync)
    message = str(caught.value)
    assert "unreachable" in message and "answered 200 with text/html, not JSON" in message
    assert "\x1b" not in message and PROXY_KEY not in message and len(message) < 500
    assert embedder.breaker.opened >= 1  # counted as a 502 would be


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"error": "no such model"}, "not an embeddings response"),
        ({"data": [{"embedding": [0.1, 0.2]}]}, "not an embeddings response"),
        ([1, 2, 3], "not an embeddings response"),
        (embeddings("not base64!"), "neither base64 float32 nor a list of numbers"),
        (embeddings(["a", "b"]), "neither base64 float32 nor a list of numbers"),
        (embeddings(base64.b64encode(b"12345").decode()), "neither base64 float32 nor a list of numbers"),
    ],
    ids=["error-object", "no-index", "a-list", "bad-base64", "strings", "odd-bytes"],
)
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_json_that_is_not_an_embeddings_response_fails_the_batch_clearly(sync, body, says):
    with HostileServer(lambda request: answer_json(request, body)) as server:
        embedder = embedder_at(server)
        with pytest.raises(EmbeddingRequestError, match=says):
            await embed(embedder, ["hello"], sync)
    assert embedder.breaker.opened == 0  # the server is up; its answer is wrong
