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
