"""The Python WordPiece path gives exactly the library's token ids for ASCII text."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from spanscore.processors.embedders import wordpiece
from spanscore.processors.embedders.static import TABLE_DIR, TOKENIZER_FILE
from spanscore.processors.embedders.wordpiece import AsciiWordPiece

TOKENIZER = Tokenizer.from_file(str(TABLE_DIR / TOKENIZER_FILE))
TOKENIZER.no_truncation()
TOKENIZER.no_padding()
PYTHON = AsciiWordPiece(TABLE_DIR / TOKENIZER_FILE)

# Every ASCII character, weighted towards what text is made of.
ascii_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(string.ascii_letters + string.digits + " .,;:!?'\"-_()[]{}/\\\n\t"),
        st.characters(min_codepoint=0, max_codepoint=127),
    ),
    max_size=300,
)


def library_ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


@settings(max_examples=500, deadline=None)
@given(ascii_text)
def test_any_ascii_text_gets_the_library_s_ids(text):
    assert PYTHON.ids(text) == library_ids(text)


def test_agent_like_text_and_edge_cases():
    texts = [
        "What's the weather in Paris?",
        "It is 21 C and sunny; DPD expects to deliver it on Thursday.",
        '{"city": "Paris", "units": "metric"}',
        "get_weather(city='Oslo') -> 5",
        "ERROR: HTTP 503 (upstream)",
        "",
        "   ",
        "\x00\x01 control\x7fchars\x0b\x0cjoin",
        "a" * 101,
        "x" * 100,
        "unaffable antidisestablishment",
        "CamelCaseWordsAndUPPER lower 12345678901234567890",
        "tab\tnew\nline\rreturn",
        "~`!@#$%^&*()_+=-{}|[]\\:\";'<>?,./",
    ]
    for text in texts:
        assert PYTHON.ids(text) == library_ids(text), text


def test_the_chunk_cache_starts_over_when_full(monkeypatch):
    monkeypatch.setattr(wordpiece, "MAX_CACHED_CHUNKS", 3)
    fresh = AsciiWordPiece(TABLE_DIR / TOKENIZER_FILE)
    text = "one two three four five one"
    assert fresh.ids(text) == library_ids(text)
    assert len(fresh._chunks) <= 3


def test_a_tokenizer_of_another_kind_is_refused(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": {"type": "BPE", "vocab": {}}, "normalizer": null, "pre_tokenizer": null}')
    with pytest.raises(ValueError, match="not a lowercasing BERT WordPiece tokenizer"):
        AsciiWordPiece(path)
