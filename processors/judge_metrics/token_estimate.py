"""How many tokens a judge prompt takes, estimated without the judge's tokenizer.

spanscore talks to any OpenAI-compatible server and cannot know its tokenizer, so it
estimates: a text is its UTF-8 bytes divided by `BYTES_PER_TOKEN`, rounded up, and a
message adds `MESSAGE_TOKENS` for the chat template's role markers. The estimate is
deterministic (the same text gives the same count on every machine) and meant to err
high: on the data blocks of the TRAIL traces in tests/fixtures/trail, Gemma 3's tokenizer
counts 3.6 to 4.1 bytes a token. It is still an estimate: compact JSON and long numbers
take fewer bytes a token, and a trace made mostly of them can count more than estimated.

Rounding up per text means parts estimated apart never add up to less than the whole
they make, so a prompt whose parts fit a budget fits it whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

BYTES_PER_TOKEN = 3
MESSAGE_TOKENS = 4  # a chat template's role markers and separators, per message


def estimate_tokens(text: str) -> int:
    """Estimated tokens of `text`: its UTF-8 bytes / BYTES_PER_TOKEN, rounded up."""
    return tokens_of_bytes(len(text.encode("utf-8")))


def tokens_of_bytes(size: int) -> int:
    """Estimated tokens of a text of `size` UTF-8 bytes, for sizes added up without the text."""
    return math.ceil(size / BYTES_PER_TOKEN)


def messages_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """Estimated tokens of a chat prompt: each message's content plus its template markers."""
    return sum(MESSAGE_TOKENS + estimate_tokens(str(message.get("content") or "")) for message in messages)
