import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spanscore.processors.embedders.hashing import DEFAULT_DIMENSION, HashingEmbedder, char_ngrams, tokenize

ROOT = Path(__file__).resolve().parents[3]
TEXTS = [
    "The agent called get_weather for Paris and reported sunny skies.",
    "Résumé: 3 retries, then the tool succeeded!",
    "",
]
DIGEST_SCRIPT = """
import hashlib, sys
from spanscore.processors.embedders.hashing import HashingEmbedder
texts = sys.stdin.read().split("\\x1e")
print(hashlib.sha256(HashingEmbedder().embed_sync(texts).tobytes()).hexdigest())
"""


def _digest_in_subprocess(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", DIGEST_SCRIPT],
        input="\x1e".join(TEXTS),
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return result.stdout.strip()


def test_vectors_are_identical_across_processes_with_different_hash_seeds():
    here = hashlib.sha256(HashingEmbedder().embed_sync(TEXTS).tobytes()).hexdigest()
    assert _digest_in_subprocess("1") == _digest_in_subprocess("2") == here


def test_rows_are_unit_float32_and_empty_texts_give_zero_rows():
    vectors = HashingEmbedder().embed_sync(["some words here", "", "   \n", "more words"])
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, DEFAULT_DIMENSION)
    norms = np.linalg.norm(vectors, axis=1)
    assert norms[0] == pytest.approx(1.0, abs=1e-5) and norms[3] == pytest.approx(1.0, abs=1e-5)
    assert not vectors[1].any() and not vectors[2].any()


def test_punctuation_only_text_gives_a_zero_row():
    assert not HashingEmbedder().embed_sync(["?!... ---"]).any()


def test_an_empty_batch_gives_an_empty_matrix():
    assert HashingEmbedder(dimension=64).embed_sync([]).shape == (0, 64)


def test_similar_texts_are_closer_than_unrelated_ones():
    a, b, c = HashingEmbedder().embed_sync(
        [
            "The cat sat on the mat",
            "A cat was sitting on a mat",
            "Quarterly revenue rose 4%",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.2
    assert float(a @ b) > float(b @ c) + 0.2


def test_inflections_share_character_ngrams():
    retry, retries, weather = HashingEmbedder().embed_sync(["retry", "retries", "weather"])
    assert float(retry @ retries) > 0.15 > abs(float(retry @ weather))


def test_case_and_unicode_forms_do_not_matter():
    vectors = HashingEmbedder().embed_sync(["Café ＯＫ", "café ok"])
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0, abs=1e-6)


def test_a_text_embeds_the_same_alone_and_in_a_batch():
    embedder = HashingEmbedder()
    batch = embedder.embed_sync([f"text number {i} about tools" for i in range(300)] + TEXTS)
    alone = embedder.embed_sync([TEXTS[0]])
    np.testing.assert_array_equal(batch[300], alone[0])


def test_word_order_changes_the_vector_through_bigrams():
    a, b = HashingEmbedder().embed_sync(["dog bites man", "man bites dog"])
    assert 0.5 < float(a @ b) < 0.999


def test_dimension_is_part_of_the_name():
    assert HashingEmbedder(dimension=256).name != HashingEmbedder().name
    with pytest.raises(ValueError, match="dimension"):
        HashingEmbedder(dimension=1)


async def test_embed_matches_embed_sync_for_small_and_large_batches():
    embedder = HashingEmbedder()
    small = ["a short one"]
    large = [f"a much longer text number {i} " * 20 for i in range(50)]
    for texts in (small, large):
        np.testing.assert_array_equal(await embedder.embed(texts), embedder.embed_sync(texts))


async def test_embed_runs_large_batches_off_the_event_loop():
    embedder = HashingEmbedder()
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    await embedder.embed([f"word{i} " * 200 for i in range(400)])
    task.cancel()
    assert ticks > 3


def test_tokens_and_char_ngrams():
    assert tokenize("Hello, WORLD! get_weather(city=Paris)") == ["hello", "world", "get_weather", "city", "paris"]
    assert char_ngrams("cat") == ["<ca", "cat", "at>", "<cat", "cat>", "<cat>"]
    assert char_ngrams("a") == ["<a>"]
