"""faithfulness without a judge: per-sentence support from embeddings, numbers and names
checked against the documents, negation compared with the best passage. Cosines are
chosen by hand (TableEmbedder), so every score below is computed by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from spanscore.processors.embedders.base import Embedder
from spanscore.processors.metrics.faithfulness import (
    CLAIM_THRESHOLD,
    DEFAULT_THRESHOLD,
    MAX_CLAIMS,
    MAX_DOCUMENT_CHARS,
    MAX_PASSAGES,
    NEGATION_FACTOR,
    KeptReadings,
    ReadingsInfo,
    faithfulness,
    faithfulness_from_vectors,
    read_context,
    read_document,
)
from tests.support.table_embedder import TableEmbedder

POLICY = "The refund window is 30 days from delivery. Refunds go to the original card."
HOURS = "Support is open Monday to Friday."
P_WINDOW, P_CARD = "The refund window is 30 days from delivery.", "Refunds go to the original card."
C_DAYS = "You can ask for a refund within 14 days of delivery."
C_CARD = "The money goes back to your card."
C_MONDAY = "Support never opens on Monday."
ANSWER = f"{C_DAYS} {C_CARD} {C_MONDAY}"

# Passages along the axes; each claim's cosine with each passage is its coordinate.
TABLE = {
    P_WINDOW: [1.0, 0.0, 0.0],
    P_CARD: [0.0, 1.0, 0.0],
    HOURS: [0.0, 0.0, 1.0],
    C_DAYS: [1.0, 0.0, 0.0],  # cos 1 with the window, but 14 is not 30
    C_CARD: [0.0, 0.8, 0.6],  # best: the card passage, 0.8
    C_MONDAY: [0.0, math.sqrt(1 - 0.9**2), 0.9],  # best: the hours, 0.9; "never" against none
}


class _AnyText(Embedder):
    """The same unit vector for every text; records how many texts each batch had."""

    name = "any"

    def __init__(self) -> None:
        self.batches: list[int] = []

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(len(texts))
        return np.tile(np.array([1.0, 0.0], np.float32), (len(texts), 1))

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_sync(texts)


@pytest.fixture
def embedder():
    return TableEmbedder(TABLE)


def test_the_worked_example_of_the_docs(embedder):
    result = faithfulness(ANSWER, [POLICY, HOURS], embedder)
    days, card, monday = result.claims
    assert (days.missing, days.score) == (("14",), 0.0)
    assert card.support == pytest.approx(0.8) and card.score == pytest.approx(0.8) and card.document == 0
    assert monday.negation_differs and monday.document == 1
    assert monday.score == pytest.approx(NEGATION_FACTOR * 0.9)  # 0.54
    assert result.score == pytest.approx((0 + 0.8 + 0.54) / 3)  # 0.4467
    assert not result.passed
    assert result.unsupported == (C_DAYS, C_MONDAY)  # 0 and 0.54, below 0.55
    assert result.missing == ("14",)
    assert result.reason == (
        '1 of 3 sentences supported by the context; not in any document: 14; unsupported: "You can ask for a '
        'refund within 14 days of delivery."; "Support never opens on Monday."'
    )
    # One batch: the claims, then the passages, the documents' sentences in turn.
    assert embedder.calls == [[C_DAYS, C_CARD, C_MONDAY, P_WINDOW, HOURS, P_CARD]]


def test_the_defaults_are_the_documented_ones():
    assert (DEFAULT_THRESHOLD, CLAIM_THRESHOLD, NEGATION_FACTOR) == (0.55, 0.55, 0.6)


def test_vectors_computed_elsewhere_give_the_same_result(embedder):
    context = read_context(ANSWER, [POLICY, HOURS])
    vectors = embedder.embed_sync(context.texts)
    assert faithfulness_from_vectors(context, vectors) == faithfulness(ANSWER, [POLICY, HOURS], embedder)


def test_an_empty_answer_states_nothing_unsupported():
    embedder = TableEmbedder({})
    for answer in ("", "   ", "...\n--"):
        result = faithfulness(answer, [POLICY], embedder)
        assert (result.score, result.claims, result.passed) == (1.0, (), True)
        assert result.reason == "the answer states nothing to check"
    assert embedder.calls == []


def test_without_context_nothing_supports_the_answer():
    embedder = TableEmbedder({})
    for documents in ([], ["", "  \n "]):
        result = faithfulness(C_DAYS, documents, embedder)
        assert (result.score, result.documents, result.passed) == (0.0, 0, False)
        assert result.claims[0].missing == ("14",)  # no document holds 14
        assert result.reason == "no context documents to support the answer"
    assert embedder.calls == []


def test_an_answer_of_only_numbers_is_scored_by_its_numbers():
    embedder = TableEmbedder({"42.": [1.0, 0.0], "The answer is 42.": [0.0, 1.0], "The answer is 41.": [0.0, 1.0]})
    held = faithfulness("42.", ["The answer is 42."], embedder)
    assert (held.score, held.claims[0].support, held.claims[0].missing) == (1.0, 1.0, ())
    wrong = faithfulness("42.", ["The answer is 41."], embedder)
    assert (wrong.score, wrong.missing) == (0.0, ("42",))


def test_numbers_are_held_at_the_answers_precision():
    document = "It was 21.37 °C at noon, 1,000 people came."
    embedder = _AnyText()

    def missing(answer: str) -> tuple[str, ...]:
        return faithfulness(answer, [document], embedder).missing

    assert missing("About 21 °C.") == ()  # 21.37 rounds to 21
    assert missing("It was 21.4 °C.") == ()  # and to 21.4
    assert missing("It was 21.3 °C.") == ("21.3",)
    assert missing("Some 1000 came.") == ()
    assert missing("Some -1,000 came.") == ("-1000",)
    assert missing("A thousand came.") == ()  # numbers in words are not read


def test_names_are_held_by_a_form_of_the_word():
    document = "Violeta Parra of Chile wrote it; published Mar 31, 2017 by the U.S. Geological Survey."
    claims = {
        "It is a Chilean song.": (),  # Chile
        "It came out in March 2017.": (),  # Mar
        "It was sung by Victor Jara.": ("Victor", "Jara"),
        "It was published by the USGS.": ("USGS",),  # an acronym is not a form of its words
        "The Geological Surveys published it.": (),  # plural
        "It was written by Neanderthals.": ("Neanderthals",),
        "It is a Parranda.": (),  # a longer form: "Parra" is 5 of its 8 letters, 62%
        "It is a Parrandero.": ("Parrandero",),  # 5 of 10, 50%
    }
    embedder = _AnyText()
    for claim, missing in claims.items():
        assert faithfulness(claim, [document], embedder).missing == missing, claim


def test_codes_are_held_on_word_boundaries():
    document = "Each result is observed in `gen_ai.evaluation.score`; see example.com."
    claims = {
        "It goes to gen_ai.evaluation.score too.": (),
        "It goes to gen_ai.evaluation.latency too.": ("gen_ai.evaluation.latency",),
        "It goes to gen_ai.evaluation too.": (),  # the start of the code, up to a dot
        "See example.com for more.": (),
        "See example.org for more.": ("example.org",),
        "Read it, e.g. twice.": (),  # an abbreviation is no code
    }
    embedder = _AnyText()
    for claim, missing in claims.items():
        assert faithfulness(claim, [document], embedder).missing == missing, claim


def test_what_the_question_holds_is_not_held_against_the_answer():
    document = "The bag holds 56 salmon."
    claim = "In the 2017 Leicester paper the bag holds 56 salmon."
    embedder = _AnyText()
    assert faithfulness(claim, [document], embedder).missing == ("2017", "Leicester")
    assert faithfulness(claim, [document], embedder, question="What did the 2017 Leicester paper find?").missing == ()


def test_a_negation_differing_from_the_best_passage_lowers_the_support():
    document = "Delivery is at least once. Nothing else changes."
    claims = {
        "Delivery is never duplicated.": True,  # "never" against the first passage's none
        "Delivery is at least once.": False,
        "Nothing else changes.": False,  # both negated
        "Everything else stays.": True,  # best passage "Nothing else changes." is negated
        "It doesn't change anything else.": False,
    }
    best = {
        "Delivery is never duplicated.": [1.0, 0.0],
        "Delivery is at least once.": [1.0, 0.0],
        "Nothing else changes.": [0.0, 1.0],
        "Everything else stays.": [0.0, 1.0],
        "It doesn't change anything else.": [0.0, 1.0],
    }
    embedder = TableEmbedder(
        {"Delivery is at least once.": [1.0, 0.0], "Nothing else changes.": [0.0, 1.0]} | best | {document: [0.0, 1.0]}
    )
    for claim, differs in claims.items():
        (support,) = faithfulness(claim, [document], embedder).claims
        assert support.negation_differs is differs, claim
        assert support.score == pytest.approx(NEGATION_FACTOR if differs else 1.0), claim


def test_negative_cosines_count_as_no_support():
    embedder = TableEmbedder({"Apples are red.": [1.0, 0.0], "Pears are green.": [-1.0, 0.0]})
    assert faithfulness("Apples are red.", ["Pears are green."], embedder).score == 0.0


def test_a_document_of_ten_megabytes_is_read_within_bounds():
    sentence = "The pump runs at 1200 rpm in Oslo. "
    huge = sentence * (10_000_000 // len(sentence)) + "The valve was made in Bergen in 1999."
    answer = " ".join(f"Claim {i} is about pumps." for i in range(MAX_CLAIMS + 10))
    embedder = _AnyText()
    result = faithfulness(answer, [huge, "A second document.", huge], embedder)
    assert len(result.claims) == MAX_CLAIMS
    assert embedder.batches == [MAX_CLAIMS + MAX_PASSAGES]
    # What lies past the first MAX_DOCUMENT_CHARS of a document is not read.
    assert len(huge) > MAX_DOCUMENT_CHARS
    tail = faithfulness("It was made in Bergen in 1999.", [huge], _AnyText())
    assert tail.missing == ("1999", "Bergen")  # numbers first, then names


def test_passages_are_taken_from_each_document_in_turn():
    long_document = " ".join(f"Fact number {i} holds." for i in range(2 * MAX_PASSAGES))
    context = read_context("An answer.", [long_document, "Short one. Short two."])
    assert len(context.passages) == MAX_PASSAGES
    assert context.passage_documents[:4] == (0, 1, 0, 1)
    assert context.passages[1] == "Short one."


def test_a_document_read_once_is_kept_read():
    read_document.cache_clear()
    first = read_context("An answer.", [POLICY, HOURS])
    again = read_context("Another answer.", [HOURS, POLICY])
    assert first.documents[0] is again.documents[1] and first.documents[1] is again.documents[0]
    assert read_document.cache_info().hits == 2
    assert again.passages == (HOURS, P_WINDOW, P_CARD)


def test_kept_readings_are_bounded_by_count_and_characters():
    kept = KeptReadings(max_documents=2, max_chars=25)
    first = kept("One fact. Two facts.")  # 20 characters
    assert kept("One fact. Two facts.") is first
    kept("Short.")  # 26 characters kept: over the bound, the least recently used goes
    assert kept.cache_info() == ReadingsInfo(hits=1, misses=2, documents=1, chars=6)
    kept("A.")
    kept("B.")  # three documents: over the count
    assert kept.cache_info().documents == 2 and kept.cache_info().chars == 4
    assert kept("Short.") is not None and kept.cache_info().misses == 5
    assert kept("B.")[0] == ("B.",) and kept("B.")[1].text == "b."
