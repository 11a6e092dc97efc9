"""Real all-MiniLM-L6-v2 embeddings. Skipped without the `minilm` extra, unless
SPANSCORE_REQUIRE_MINILM=1 (as in CI, which installs it), where its absence fails."""

import asyncio

import numpy as np
import pytest

from spanscore.processors.embedders import minilm
from spanscore.processors.embedders.minilm import DIMENSION, MiniLMEmbedder, MissingExtraError
from tests.support.minilm_extra import require_extra


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    require_extra()
    model = MiniLMEmbedder(batch_size=8)
    model.load()
    return model


def test_rows_are_384_dimensional_unit_vectors(embedder):
    vectors = embedder.embed_sync(["The cat sat on the mat", "Quarterly revenue rose 4%"])
    assert vectors.shape == (2, DIMENSION) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(embedder):
    cat, sitting, revenue = embedder.embed_sync(
        ["The cat sat on the mat", "A cat was sitting on a mat", "Quarterly revenue rose 4%"]
    )
    assert float(cat @ sitting) > float(cat @ revenue) + 0.3


def test_empty_texts_give_zero_rows_and_are_not_embedded(embedder):
    vectors = embedder.embed_sync(["", "hello there", "  "])
    assert not vectors[0].any() and not vectors[2].any()
    np.testing.assert_allclose(vectors[1], embedder.embed_sync(["hello there"])[0], atol=1e-5)


async def test_embed_matches_embed_sync_and_leaves_the_loop_free(embedder):
    texts = [f"sentence number {i} about the weather in Paris" for i in range(64)]
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    vectors = await embedder.embed(texts)
    task.cancel()
    np.testing.assert_allclose(vectors, embedder.embed_sync(texts), atol=1e-5)
    assert ticks > 3


def test_the_model_loads_once_and_reports_how_long_it_took(embedder):
    assert embedder.loaded and embedder.load_seconds is not None
    embedder.load()
    assert embedder.load_seconds > 0


def test_all_empty_input_needs_no_model():
    require_extra()
    fresh = MiniLMEmbedder()
    assert fresh.embed_sync(["", " "]).shape == (2, DIMENSION)
    assert not fresh.loaded


def test_a_missing_extra_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(minilm, "REQUIRED_MODULES", ("spanscore_no_such_module",))
    with pytest.raises(MissingExtraError, match=r"install spanscore\[minilm\]"):
        MiniLMEmbedder()
