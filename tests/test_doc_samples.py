"""The sample outputs in the docs are what the commands print today (tests/support/doc_samples.py
says how a block is marked, run and compared; `python -m tests.support.doc_samples --write`
rewrites them)."""

from __future__ import annotations

import pytest

from tests.support.doc_samples import SAMPLES, Runs, blocks, documents, masked

BLOCKS = [block for path in documents() for block in blocks(path)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("doc-samples"))


def test_every_sample_is_shown_and_every_marked_block_has_a_sample():
    assert sorted({block.name for block in BLOCKS}) == sorted(SAMPLES)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.path.name}:{b.name}" for b in BLOCKS])
def test_the_sample_is_what_the_command_prints(block, runs):
    fresh = SAMPLES[block.name](runs)
    assert masked(block.text) == masked(fresh), (
        f"{block.path.name}: sample {block.name!r} is stale; run `python -m tests.support.doc_samples --write`"
    )


def test_masking_hides_only_what_varies():
    carrier = "trace 4fbc5378d06c622619645196989ae1fd root='evaluate_session' spans=1\n"
    assert masked(carrier) == "trace <carrier trace id> root='evaluate_session' spans=1\n"
    agent = "trace 5c00e5c00e0000000000000000000001 root='invoke_agent weather-agent'\n"
    assert masked(agent) == agent
    assert masked("score = 0.6400825286814532") == masked("score = 0.6400825286814534") == "score = 0.640082528681"
    assert masked("score = 0.64") != masked("score = 0.65")


def test_the_readme_states_the_embedders_scores_of_the_sample_session():
    """The README's prose compares the embedders on the sample session's two turns."""
    from spanscore.processors.embedders.hashing import HashingEmbedder
    from spanscore.processors.embedders.minilm import MiniLMEmbedder
    from spanscore.processors.embedders.static import StaticEmbedder
    from spanscore.processors.metrics import coherence
    from tests.support.minilm_extra import require_extra
    from tests.support.processes import ROOT

    require_extra()
    turns = [
        ("What's the weather in Paris?", "It is 21°C and sunny in Paris."),
        ("And in Lyon?", "Lyon has light rain at 17°C."),
    ]

    def scores(embedder) -> list[str]:
        return [f"{coherence(question, answer, embedder=embedder).score:.2f}" for question, answer in turns]

    (static, _), (minilm_paris, minilm_lyon), (hashing_paris, hashing_lyon) = (
        scores(StaticEmbedder()),
        scores(MiniLMEmbedder()),
        scores(HashingEmbedder()),
    )
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"score {static} with it" in readme
    assert f"gives {minilm_paris} and, for the elliptical" in readme and f'at 17°C.", {minilm_lyon}.' in readme
    assert f"gives {hashing_paris} and {hashing_lyon}:" in readme
