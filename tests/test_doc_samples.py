"""The sample outputs in the docs are what the commands print today (tests/support/doc_samples.py
says how a block is marked, run and compared; `python -m tests.support.doc_samples --write`
rewrites them), and the example files they run on are what tests/support/example_files.py
makes (`python -m tests.support.example_files --write` rewrites those)."""

from __future__ import annotations

import pytest

from tests.support import example_files
from tests.support.doc_samples import LONG_FLOAT, SAMPLES, Runs, blocks, documents, masked

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
    assert masked("score = 0.6400825286814532") != masked("score = 0.6400825286814534")


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.path.name}:{b.name}" for b in BLOCKS])
def test_no_sample_shows_digits_that_differ_between_machines(block):
    """A float printed in full can end in other digits where sums are ordered otherwise."""
    assert not LONG_FLOAT.findall(block.text), f"{block.path.name}: sample {block.name!r} shows a float in full"


def test_the_example_files_are_what_their_generator_makes():
    for path, text in example_files.texts().items():
        shipped = example_files.gunzipped(path) if path.suffix == ".gz" else path.read_text(encoding="utf-8")
        assert shipped == text, f"{path.name} is stale; run `python -m tests.support.example_files --write`"
    from tests.support.trail_scored import ANNOTATIONS

    trail = example_files.TRAIL
    assert (trail / ANNOTATIONS.name).read_bytes() == ANNOTATIONS.read_bytes()
    assert (trail / "LICENSE").read_bytes() == ANNOTATIONS.with_name("LICENSE").read_bytes()


def test_the_scored_trail_example_is_what_the_loopback_judge_scores_today():
    """Scored again, the five TRAIL traces carry the same scores, explanations, evaluators
    and revisions as the shipped file; only when they were scored differs."""
    shipped = example_files.without_event_times(example_files.gunzipped(example_files.TRAIL_SCORED))
    assert shipped == example_files.without_event_times(example_files.scored_trail()), (
        "examples/trail/gaia-5.scored.jsonl.gz is stale; run `python -m tests.support.example_files --write`"
    )


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
