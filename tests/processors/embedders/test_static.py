"""The static embedder (MiniLM's distilled token table, the base install's default):
unit rows, zero rows for text without content, the same vector alone or in a batch, no
torch, and, against the full model, Spearman >= 0.85 on the agent-like pair fixture."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spanscore.processors.embedders import build_embedder
from spanscore.processors.embedders.static import INLINE_TEXTS, TABLE_DIR, StaticEmbedder
from tests.support.minilm_extra import require_extra

ROOT = Path(__file__).resolve().parents[3]
PAIRS = ROOT / "tests" / "fixtures" / "embedder_pairs.jsonl"


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return StaticEmbedder()


def test_rows_are_unit_vectors_of_the_table_s_width(embedder):
    vectors = embedder.embed_sync(["What's the weather in Paris?", "It is 21°C and sunny in Paris."])
    assert vectors.shape == (2, 128) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.name == "static-minilm-v1-d128"


def test_text_without_content_is_a_zero_row(embedder):
    vectors = embedder.embed_sync(["", "   \n", "🙂🙂", "ok"])  # emoji are [UNK], whose row is zero
    assert not vectors[:3].any()
    assert np.linalg.norm(vectors[3]) == pytest.approx(1.0, abs=1e-5)


def test_a_text_embeds_the_same_alone_and_in_a_batch_and_async(embedder):
    texts = [f"Order {i} shipped from the Lyon depot" for i in range(INLINE_TEXTS + 10)]
    batch = embedder.embed_sync(texts)
    assert np.array_equal(batch[37], embedder.embed_sync([texts[37]])[0])
    assert np.array_equal(asyncio.run(embedder.embed(texts)), batch)  # the worker-thread path


def test_vectors_are_the_sums_of_the_library_s_token_rows(embedder):
    # ASCII text takes the Python tokenizer, other text the library; lengths vary so
    # that pooling pads groups; one text runs past the model's 254 pieces.
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TABLE_DIR / "tokenizer.json"))
    texts = [
        "Where is my order 1234?",
        "Zürich: 5 °C, leichter Regen",
        "ok",
        "",
        "東京の天気は?",
        " ".join(f"word{i}" for i in range(400)),
        "The parcel left the Lyon depot; DPD delivers Thursday.",
    ] * 20
    table = np.load(TABLE_DIR / "static_minilm.npz")["embeddings"].astype(np.float64)
    expected = np.zeros((len(texts), table.shape[1]))
    for i, text in enumerate(texts):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        assert len(ids) <= 254
        expected[i] = table[ids].sum(axis=0)
    norms = np.linalg.norm(expected, axis=1, keepdims=True)
    expected = np.divide(expected, norms, out=np.zeros_like(expected), where=norms > 0)
    np.testing.assert_allclose(embedder.embed_sync(texts), expected, atol=1e-5)


def test_long_text_is_cut_at_the_model_s_length(embedder):
    long = " ".join(["weather"] * 300 + ["banana"] * 300)
    only_weather = " ".join(["weather"] * 300)
    vectors = embedder.embed_sync([long, only_weather])
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0, abs=1e-5)  # the bananas are past 254 pieces


def test_it_is_semantic(embedder):
    question, answer, unrelated = embedder.embed_sync(
        ["What's the weather in Paris?", "It is 21°C and sunny in Paris.", "Quarterly revenue rose four percent."]
    )
    assert float(question @ answer) > float(question @ unrelated) + 0.3


def test_the_config_type_and_the_cache(embedder):
    cached = build_embedder({"type": "static"})
    assert cached.name == embedder.name
    assert np.array_equal(cached.embed_sync(["a parcel"]), embedder.embed_sync(["a parcel"]))


def test_it_imports_no_torch():
    script = (
        "import sys; from spanscore.processors.embedders.static import StaticEmbedder; "
        "StaticEmbedder().embed_sync(['hello world']); print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


def test_a_missing_table_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="cannot load its table"):
        StaticEmbedder(tmp_path)
    assert (TABLE_DIR / "static_minilm.npz").is_file()


def ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(len(values))
    return ranked


def test_it_ranks_agent_text_pairs_as_minilm_does(embedder):
    require_extra()
    from spanscore.processors.embedders.minilm import MiniLMEmbedder

    pairs = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    assert len(pairs) >= 300 and len({p["kind"] for p in pairs}) >= 8

    def cosines(embed) -> np.ndarray:
        a, b = embed([p["a"] for p in pairs]), embed([p["b"] for p in pairs])
        return np.einsum("ij,ij->i", a, b)

    full = MiniLMEmbedder(batch_size=64)
    reference, static = cosines(full.embed_sync), cosines(embedder.embed_sync)
    spearman = float(np.corrcoef(ranks(reference), ranks(static))[0, 1])
    assert spearman >= 0.85, spearman
