"""The no-judge faithfulness metric against people: 221 (question, context, answer)
triples labelled by reading them (tests/fixtures/faithfulness/, bench/faithfulness.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.support.faithfulness_triples import agreement, read_triples, roc_area, scores

# What the metric reaches with the static embedder (docs/metrics.md): on the dev half,
# on which its negation factor and threshold were chosen, ROC area 0.966 and accuracy
# 0.924 at the default threshold; on the held-out half, only measured, 0.865 and 0.810.
# What it misses there: negations and antonyms that embed like the document's sentence
# (10 of 18 held-out negations pass), abbreviations it cannot expand (NY for New York,
# USGS, Sep), numbers glued to letters (FY2020). The bounds hold it to what it reaches.
BOUNDS = {"dev": (0.95, 0.90), "held-out": (0.85, 0.79)}  # ROC area, accuracy


@pytest.fixture(scope="module")
def triples():
    return read_triples()


@pytest.fixture(scope="module")
def scored(triples):
    from spanscore.processors.embedders.static import StaticEmbedder

    return scores(triples, StaticEmbedder())


def test_the_triples_are_many_balanced_and_of_every_kind(triples):
    assert len(triples) >= 200
    for split in ("dev", "held-out"):
        labels = Counter(t.label for t in triples if t.split == split)
        assert labels["faithful"] >= 50 and labels["unfaithful"] >= 50, split
    kinds = Counter(t.kind for t in triples)
    assert all(kinds[kind] >= 5 for kind in ("number", "date", "name", "negation", "outside", "partial")), kinds
    assert all(kinds[kind] >= 10 for kind in ("paraphrase", "summary", "combined")), kinds


def test_the_halves_share_no_source_document(triples):
    sources = {split: {s for t in triples if t.split == split for s in t.sources} for split in ("dev", "held-out")}
    assert not sources["dev"] & sources["held-out"]


@pytest.mark.parametrize("split", ["dev", "held-out"])
def test_the_metric_agrees_with_people_within_its_bounds(triples, scored, split):
    half = [t for t in triples if t.split == split]
    area_bound, accuracy_bound = BOUNDS[split]
    agreed = agreement(half, scored)
    assert roc_area(half, scored) >= area_bound
    assert agreed.accuracy >= accuracy_bound, (agreed.false_fails, agreed.false_passes)
