"""Text with non-ASCII characters: cut at ASCII whitespace, its ASCII chunks tokenized in
Python and the others by the library, it gets exactly the ids the library gives the whole text."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from spanscore.processors.embedders.static import StaticEmbedder

EMBEDDER = StaticEmbedder()

mixed_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(string.ascii_letters + string.digits + " .,;:!?'\"-_()\n\t\r\x0b\x0c\x00\x85\xa0"),
        st.sampled_from("éèàüößçñ—–…“”‘’€£°×中文日本語한국어Ωπ\u2028\u3000\u200b\ufffd\u0301"),
        st.characters(blacklist_categories=("Cs",)),  # lone surrogates: the library refuses them, as before
    ),
    max_size=300,
)


def library_ids(texts: list[str]) -> list[list[int]]:
    return [encoding.ids for encoding in EMBEDDER._tokenizer.encode_batch(texts, add_special_tokens=False)]


@settings(max_examples=500, deadline=None)
@given(mixed_text)
def test_any_text_gets_the_library_s_ids(text):
    assert EMBEDDER._token_ids([text]) == library_ids([text])


def test_documents_with_a_few_non_ascii_words_and_their_chunks_seen_again():
    texts = [
        "The café — open 9–5 — serves crème brûlée.",
        "Zürich’s “Altstadt” is 2 km²; naïve résumé " + "word " * 300,
        "中文 mixed with English, and café again.",
        "   leading\tand trailing é   ",
        "",
    ]
    assert EMBEDDER._token_ids(texts) == library_ids(texts)
    assert EMBEDDER._token_ids(texts) == library_ids(texts)  # chunks from the kept table
