"""Loop detection: 1 - max(cosine × Jaccard) over the last `window` outputs of the session."""

from __future__ import annotations

import dataclasses
import sys
import types

import numpy as np
import pytest

from spanscore.processors.metrics import PreviousOutput, loop_detection, loop_detection_from_vectors, word_set
from tests.support.table_embedder import TableEmbedder

CURRENT = "Check the weather in Tokyo."  # {check, weather, tokyo}
SIMILAR = "check the weather for Osaka"  # {check, weather, osaka}: Jaccard 2/4 = 0.5
RELATED = "Kyoto forecast: rain tomorrow"  # {kyoto, forecast, rain, tomorrow}: Jaccard 0
UNRELATED = "Booked table for two at eight"  # {booked, table, two, eight}: Jaccard 0
OPPOSED = "weather in tokyo"  # {weather, tokyo}: Jaccard 2/3
EMPTY_WORDS = "it is, or is not"  # no words at all

TABLE = {
    CURRENT: [1.0, 0.0],
    SIMILAR: [0.6, 0.8],  # cos 0.6
    RELATED: [0.8, 0.6],  # cos 0.8
    UNRELATED: [0.0, 1.0],  # cos 0
    OPPOSED: [-1.0, 0.0],  # cos -1
    EMPTY_WORDS: [1.0, 0.0],  # cos 1
}


@pytest.fixture
def embedder():
    return TableEmbedder(TABLE)


def test_no_previous_trace_scores_one(embedder):
    result = loop_detection(CURRENT, [], embedder=embedder)
    assert result.name == "loop_detection"
    assert result.score == 1.0
    assert result.explanation == "No previous trace in the session to compare with."
    assert result.metadata == {"window_size": 3, "comparisons": []}
    assert embedder.calls == []


def test_repeating_the_previous_output_scores_zero(embedder):
    result = loop_detection(CURRENT, [CURRENT], embedder=embedder)
    # cos 1 × Jaccard 1 = hybrid 1 -> score 1 - 1 = 0
    assert result.score == pytest.approx(0.0, abs=1e-6)
    assert result.label == "fail"
    assert result.metadata["max_hybrid"] == 1.0


def test_hybrid_is_cosine_times_jaccard(embedder):
    result = loop_detection(CURRENT, [SIMILAR], embedder=embedder)
    # cos 0.6 × Jaccard 0.5 = 0.3 -> score 0.7
    assert result.score == pytest.approx(0.7, abs=1e-6)
    assert result.metadata == {
        "window_size": 3,
        "max_hybrid": 0.3,
        "comparisons": [
            {"trace_index": 0, "cosine_similarity": 0.6, "jaccard_similarity": 0.5, "hybrid_score": 0.3},
        ],
    }
    assert result.explanation == (
        "Highest hybrid similarity 0.30 (cosine 0.60 × Jaccard 0.50) with trace 0 of the 1 previous compared."
    )


def test_score_uses_the_most_similar_previous_output(embedder):
    result = loop_detection(CURRENT, [SIMILAR, UNRELATED, RELATED], embedder=embedder)
    # hybrids: 0.6 × 0.5 = 0.3, 0 × 0 = 0, 0.8 × 0 = 0 -> max 0.3 -> score 0.7
    assert result.score == pytest.approx(0.7, abs=1e-6)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [0, 1, 2]
    assert [c["hybrid_score"] for c in result.metadata["comparisons"]] == [0.3, 0.0, 0.0]
    assert "with trace 0 of the 3 previous compared" in result.explanation


def test_related_but_differently_worded_output_is_not_a_loop(embedder):
    # docs/metrics.md's "enumerate related items": high cosine 0.8, Jaccard 0 -> hybrid 0 -> score 1.
    result = loop_detection(CURRENT, [RELATED], embedder=embedder)
    assert result.score == 1.0
    assert result.metadata["comparisons"][0]["cosine_similarity"] == pytest.approx(0.8, abs=1e-4)


def test_unrelated_output_is_not_a_loop(embedder):
    # cos 0, Jaccard 0 -> hybrid 0 -> score 1
    assert loop_detection(CURRENT, [UNRELATED], embedder=embedder).score == 1.0


def test_window_keeps_only_the_last_three_previous_outputs(embedder):
    # The two oldest repeat CURRENT exactly, but only indexes 2, 3, 4 are in the window.
    previous = [CURRENT, CURRENT, SIMILAR, UNRELATED, RELATED]
    result = loop_detection(CURRENT, previous, embedder=embedder)
    # max(0.6 × 0.5, 0, 0) = 0.3 -> 0.7; with the old ones it would be 0.
    assert result.score == pytest.approx(0.7, abs=1e-6)
    assert [c["trace_index"] for c in result.metadata["comparisons"]] == [2, 3, 4]
    assert embedder.calls == [[SIMILAR, UNRELATED, RELATED, CURRENT]]  # only the window is embedded


def test_window_is_configurable(embedder):
    previous = [SIMILAR, CURRENT, UNRELATED]
    # window 1: only UNRELATED (index 2) -> 1.0; window 2: CURRENT (index 1) repeats -> 0
    narrow = loop_detection(CURRENT, previous, embedder=embedder, window=1)
    assert narrow.score == 1.0
    assert narrow.metadata["window_size"] == 1
    assert [c["trace_index"] for c in narrow.metadata["comparisons"]] == [2]
    assert loop_detection(CURRENT, previous, embedder=embedder, window=2).score == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("window", [0, -1, True, 2.0])
def test_window_must_be_a_positive_int(embedder, window):
    with pytest.raises(ValueError, match="window"):
        loop_detection(CURRENT, [SIMILAR], embedder=embedder, window=window)
    with pytest.raises(ValueError, match="window"):
        loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), [], window=window)


def test_negative_hybrid_is_clamped_to_a_score_of_one(embedder):
    result = loop_detection(CURRENT, [OPPOSED], embedder=embedder)
    # cos -1 × Jaccard 2/3 = -0.6667 -> 1 - (-0.6667) = 1.6667, clamped to 1
    assert result.score == 1.0
    assert result.metadata["max_hybrid"] == -0.6667
    assert result.metadata["comparisons"][0]["jaccard_similarity"] == 0.6667


def test_outputs_without_words_never_count_as_a_loop(embedder):
    # Same vector (cos 1) but both word sets are empty: Jaccard 0 -> hybrid 0 -> score 1.
    result = loop_detection(EMPTY_WORDS, [EMPTY_WORDS], embedder=embedder)
    assert result.score == 1.0
    assert result.metadata["comparisons"][0]["jaccard_similarity"] == 0.0


def test_metadata_is_rounded_to_four_decimals_but_the_score_is_not():
    # cos((1, 0), (1, 1)) = 0.70710678; Jaccard {check, weather, tokyo} vs {weather} = 1/3;
    # hybrid = 0.23570226 -> score 0.76429774
    previous = [PreviousOutput.of(0, "weather", np.array([1.0, 1.0]))]
    result = loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), previous)
    assert result.metadata["comparisons"] == [
        {"trace_index": 0, "cosine_similarity": 0.7071, "jaccard_similarity": 0.3333, "hybrid_score": 0.2357},
    ]
    assert result.metadata["max_hybrid"] == 0.2357
    assert result.score == pytest.approx(1 - 0.70710678 / 3, abs=1e-7)
    assert result.score != round(result.score, 4)


def test_pass_at_equality_with_the_threshold():
    # cos((1, 0), (3, 4)) = 3/5 = 0.6; Jaccard 0.5 -> hybrid 0.3 -> score 1 - 0.3 = 0.7 exactly
    previous = [PreviousOutput.of(0, SIMILAR, np.array([3.0, 4.0]))]
    assert loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), previous).score == 0.7
    assert loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), previous, threshold=0.7).passed
    assert not loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), previous, threshold=0.71).passed


def test_output_may_be_given_as_text_or_word_set():
    previous = [PreviousOutput.of(4, SIMILAR, np.array([3.0, 4.0]))]
    vector = np.array([1.0, 0.0])
    from_text = loop_detection_from_vectors(CURRENT, vector, previous)
    assert loop_detection_from_vectors(word_set(CURRENT), vector, previous) == from_text
    assert from_text.metadata["comparisons"][0]["trace_index"] == 4


def test_pipeline_style_incremental_session_matches_the_text_function(embedder):
    """Keeping one PreviousOutput per scored trace gives what loop_detection gives on texts."""
    outputs = [SIMILAR, CURRENT, UNRELATED, CURRENT, RELATED]
    kept: list[PreviousOutput] = []
    for index, text in enumerate(outputs):
        vector = embedder.embed_sync([text])[0]
        tokens = word_set(text)
        incremental = loop_detection_from_vectors(tokens, vector, kept)
        assert incremental == loop_detection(text, outputs[:index], embedder=TableEmbedder(TABLE))
        kept.append(PreviousOutput(trace_index=index, vector=vector, tokens=tokens))


def test_previous_output_copies_its_vector_and_is_immutable():
    vector = np.array([1.0, 0.0])
    entry = PreviousOutput.of(0, "Weather in Tokyo", vector)
    vector[0] = -5.0
    assert entry.vector.tolist() == [1.0, 0.0]
    assert entry.vector.dtype == np.float32
    assert entry.tokens == frozenset({"weather", "tokyo"})
    with pytest.raises(ValueError):
        entry.vector[0] = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.trace_index = 3  # type: ignore[misc]


@pytest.mark.parametrize("index", [-1, 1.0, True])
def test_previous_output_index_must_be_a_non_negative_int(index):
    with pytest.raises(ValueError, match="trace_index"):
        PreviousOutput(trace_index=index, vector=np.array([1.0]), tokens=frozenset())


def test_vectors_of_different_dimensions_are_rejected():
    previous = [PreviousOutput.of(0, SIMILAR, np.array([1.0, 0.0, 0.0]))]
    with pytest.raises(ValueError, match="differ in dimension"):
        loop_detection_from_vectors(CURRENT, np.array([1.0, 0.0]), previous)


def test_default_embedder_is_imported_only_when_needed(monkeypatch, fresh_default_embedder):
    created = []

    class FakeStaticEmbedder(TableEmbedder):
        def __init__(self):
            super().__init__(TABLE)
            created.append(self)

    module = types.ModuleType("spanscore.processors.embedders.static")
    module.StaticEmbedder = FakeStaticEmbedder
    monkeypatch.setitem(sys.modules, "spanscore.processors.embedders.static", module)

    assert loop_detection(CURRENT, []).score == 1.0
    assert created == []
    assert loop_detection(CURRENT, [SIMILAR]).score == pytest.approx(0.7, abs=1e-6)
    assert created[0].calls == [[SIMILAR, CURRENT]]
