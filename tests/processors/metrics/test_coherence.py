"""Coherence: cosine similarity of the input and output embeddings, clamped to [0, 1]."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest

from spanscore.processors.metrics import coherence, coherence_from_vectors, cosine_similarity
from tests.support.table_embedder import TableEmbedder

QUESTION = "What is the weather in Tokyo?"
ANSWER = "Tokyo is sunny, 24 degrees."
OFF_TOPIC = "Here is a cake recipe."
OPPOSITE = "Nothing to do with anything."

EMBEDDER_TABLE = {
    QUESTION: [1.0, 0.0],
    ANSWER: [0.6, 0.8],  # cos with QUESTION = 0.6
    OFF_TOPIC: [0.0, 1.0],  # cos with QUESTION = 0
    OPPOSITE: [-1.0, 0.0],  # cos with QUESTION = -1
}


@pytest.fixture
def embedder():
    return TableEmbedder(EMBEDDER_TABLE)


def test_score_is_the_cosine_similarity_of_input_and_output(embedder):
    result = coherence(QUESTION, ANSWER, embedder=embedder)
    # cos((1, 0), (0.6, 0.8)) = 0.6; score = 1 - (1 - 0.6) = 0.6
    assert result.name == "coherence"
    assert result.score == pytest.approx(0.6, abs=1e-6)
    assert result.metadata == {"coherence_gap": 0.4}  # 1 - 0.6, rounded to 4 decimals
    assert result.explanation == "Cosine similarity 0.60 between input and output (distance 0.40)."
    assert result.label == "pass"


def test_each_text_is_embedded_once_in_one_batch(embedder):
    coherence(QUESTION, ANSWER, embedder=embedder)
    assert embedder.calls == [[QUESTION, ANSWER]]


def test_orthogonal_output_scores_zero(embedder):
    result = coherence(QUESTION, OFF_TOPIC, embedder=embedder)
    # cos((1, 0), (0, 1)) = 0 -> score 0, gap 1
    assert result.score == pytest.approx(0.0, abs=1e-6)
    assert result.metadata["coherence_gap"] == 1.0
    assert result.label == "fail"


def test_negative_cosine_is_clamped_to_zero(embedder):
    result = coherence(QUESTION, OPPOSITE, embedder=embedder)
    # cos((1, 0), (-1, 0)) = -1 -> 1 - cosine distance 2 = -1, clamped to 0; gap = 2
    assert result.score == 0.0
    assert result.metadata["coherence_gap"] == 2.0


def test_identical_texts_score_one(embedder):
    result = coherence(QUESTION, QUESTION, embedder=embedder)
    assert result.score == pytest.approx(1.0)
    assert result.metadata["coherence_gap"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    ("input_text", "output_text", "explanation", "empty"),
    [
        ("", ANSWER, "Coherence assumed: the input was empty.", ["input"]),
        (QUESTION, "", "Coherence assumed: the output was empty.", ["output"]),
        ("", "", "Coherence assumed: the input and output were empty.", ["input", "output"]),
        (" \n\t", ANSWER, "Coherence assumed: the input was empty.", ["input"]),
        (QUESTION, "   ", "Coherence assumed: the output was empty.", ["output"]),
    ],
)
def test_empty_input_or_output_assumes_coherence(embedder, input_text, output_text, explanation, empty):
    result = coherence(input_text, output_text, embedder=embedder)
    assert result.score == 1.0
    assert result.explanation == explanation
    assert result.metadata == {"coherence_assumed": True, "empty": empty}
    assert embedder.calls == []  # nothing to embed


def test_gap_is_rounded_to_four_decimals_in_metadata_only():
    # cos((1, 0), (1, 1)) = 1/sqrt(2) = 0.70710678...; gap = 0.29289321... -> 0.2929
    result = coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([1.0, 1.0]))
    assert result.metadata["coherence_gap"] == 0.2929
    assert result.score == pytest.approx(1 / math.sqrt(2), abs=1e-12)
    assert result.score != round(result.score, 4)


def test_pass_at_equality_with_the_threshold():
    # cos((1, 0), (3, 4)) = 3 / 5 = 0.6 exactly in floating point
    score = coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([3.0, 4.0])).score
    assert score == 0.6
    assert coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([3.0, 4.0]), threshold=0.6).passed
    assert not coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([3.0, 4.0]), threshold=0.61).passed


def test_default_threshold_is_one_half():
    # cos((1, 0), (1, 1.7320508)) = 0.5 (a 60 degree angle)
    result = coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([0.5, math.sqrt(3) / 2]))
    assert result.threshold == 0.5
    assert result.score == pytest.approx(0.5)


def test_text_function_gives_the_same_result_as_the_vector_core(embedder):
    vectors = embedder.embed_sync([QUESTION, ANSWER])
    from_vectors = coherence_from_vectors(QUESTION, ANSWER, vectors[0], vectors[1], threshold=0.7)
    assert coherence(QUESTION, ANSWER, embedder=embedder, threshold=0.7) == from_vectors


def test_empty_case_needs_no_vectors():
    assert coherence_from_vectors("", "output", None, None).score == 1.0


def test_missing_vectors_for_non_empty_texts_are_an_error():
    with pytest.raises(ValueError, match="input_vector and output_vector are required"):
        coherence_from_vectors("q", "a", np.array([1.0, 0.0]), None)


def test_zero_vector_for_a_non_empty_text_is_similar_to_nothing():
    # An embedder gives a zero row for text with no content; its cosine with anything is 0.
    result = coherence_from_vectors("q", "!!!", np.array([1.0, 0.0]), np.zeros(2))
    assert result.score == 0.0
    assert result.metadata["coherence_gap"] == 1.0


def test_vectors_of_different_dimensions_are_rejected():
    with pytest.raises(ValueError, match="differ in dimension"):
        coherence_from_vectors("q", "a", np.array([1.0, 0.0]), np.array([1.0, 0.0, 0.0]))


@pytest.mark.parametrize("bad", [np.array([np.nan, 1.0]), np.array([np.inf, 1.0]), np.zeros((1, 2)), np.array([])])
def test_malformed_vectors_are_rejected(bad):
    with pytest.raises(ValueError):
        coherence_from_vectors("q", "a", np.array([1.0, 0.0]), bad)


def test_cosine_similarity_never_leaves_minus_one_to_one():
    rng = np.random.default_rng(7)
    for vector in rng.normal(size=(200, 384)).astype(np.float32):
        assert 1.0 - 1e-6 <= cosine_similarity(vector, vector) <= 1.0
        assert -1.0 <= cosine_similarity(vector, -vector) <= -1.0 + 1e-6


def test_default_embedder_is_imported_only_when_needed(monkeypatch, fresh_default_embedder):
    created = []

    class FakeStaticEmbedder(TableEmbedder):
        def __init__(self):
            super().__init__(EMBEDDER_TABLE)
            created.append(self)

    module = types.ModuleType("spanscore.processors.embedders.static")
    module.StaticEmbedder = FakeStaticEmbedder
    monkeypatch.setitem(sys.modules, "spanscore.processors.embedders.static", module)

    assert coherence("", ANSWER).score == 1.0
    assert created == []  # an empty side needs no embedder
    assert coherence(QUESTION, ANSWER).score == pytest.approx(0.6, abs=1e-6)
    assert len(created) == 1 and created[0].calls == [[QUESTION, ANSWER]]
