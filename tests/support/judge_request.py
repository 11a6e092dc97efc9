"""A small judge request for the judge client's tests: a score-and-reason schema, two
messages, a retry policy that gives up fast, the loopback server's answer to it, and the
chat requests the server saw."""

from __future__ import annotations

import json

from spanscore.processors.judge_metrics.client import RetryPolicy
from tests.support.openai_server import Reply

SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "system", "content": "You grade answers."}, {"role": "user", "content": "Grade: 2+2=4"}]
FAST_RETRY = RetryPolicy(max_retries=3, initial_backoff_s=0.01, max_backoff_s=0.05)


def answer(score=0.5, reason="fine", **kwargs) -> Reply:
    return Reply(content=json.dumps({"score": score, "reason": reason}), **kwargs)


def chat_requests(server):
    return server.requests_to("/chat/completions")
