"""The judge's versions of `rag_metrics`' faithfulness, context_relevance and answer_relevance.

With a `judge:` section, `rag_metrics` asks an LLM judge instead of embedding, one call
per scored span:

- `faithfulness` (an LLM span and its context documents), as Ragas asks it but in one
  call: the judge lists the answer's claims, each with whether the documents support it
  and, when not, why. Score = supported claims / claims. An answer the judge finds no
  claim in scores 1.0 and says so, as the embedder's version scores an answer that
  states nothing: there is nothing in it the context could fail to support.
- `context_relevance` (a retrieval span): each document relevant to the query or not.
  Score = relevant documents / documents judged.
- `answer_relevance` (the final answer's LLM span): a 0..1 score of how far the answer
  addresses the question, and why.

The prompts are judge_metrics' (`PromptBuilder`): its system message, the recorded texts
redacted, cut to `max_field_chars` and defanged inside `<trace_data>`, then the
instructions. Each call fits `max_input_tokens` by judge_metrics' token estimate
(`trace_view.fit`: shorter fields first, then documents left out from the middle, which
the block, the result's explanation and its metadata say). The answer goes through the
judge client: checked against its schema (a malformed one is asked again), retried,
cached, budgeted, held by the circuit breaker. A `JudgeError` is the caller's to record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spanscore.core.quoting import excerpt
from spanscore.core.redaction import Redaction
from spanscore.processors.judge_metrics.answers import MalformedAnswer, validate
from spanscore.processors.judge_metrics.base import Judge, JudgeError, Verdict
from spanscore.processors.judge_metrics.planner import (
    DEFAULT_MAX_INPUT_TOKENS,
    INPUT_TOO_LARGE,
    MIN_DATA_TOKENS,
    Usage,
)
from spanscore.processors.judge_metrics.prompts import (
    DEFAULT_MAX_FIELD_CHARS,
    TRACE_CLOSE,
    TRACE_OPEN,
    Entry,
    Layout,
    Line,
    PromptBuilder,
    prompt_tokens,
)
from spanscore.processors.judge_metrics.rubrics import MALFORMED
from spanscore.processors.judge_metrics.trace_view import Coverage, DoesNotFit, View, fit
from spanscore.processors.metrics.faithfulness import MAX_CLAIMS

# Documents shown to one call, the first ones: the context-relevance answer has a key
# per document, and a long tail of retrieved documents says little about the first.
MAX_JUDGED_DOCUMENTS = 32
QUOTED = 3  # unsupported claims and irrelevant documents named in an explanation
QUOTE_CHARS = 160

FAITHFULNESS_SCHEMA_NAME = "rag_faithfulness"
RELEVANCE_SCHEMA_NAME = "rag_context_relevance"
ANSWER_SCHEMA_NAME = "rag_answer_relevance"
DOCUMENT_KEY = "document_{number}"
NO_CLAIMS = "the judge found no claim in the answer: nothing to hold against the context"


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    # Every property required and nothing else allowed: what strict structured outputs need.
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


REASON = {"type": "string"}
UNIT = {"type": "number", "minimum": 0.0, "maximum": 1.0}
CLAIM = _object({"claim": {"type": "string", "minLength": 1}, "reason": REASON, "supported": {"type": "boolean"}})
FAITHFULNESS_SCHEMA = _object({"claims": {"type": "array", "maxItems": MAX_CLAIMS, "items": CLAIM}})
ANSWER_SCHEMA = _object({"reason": REASON, "score": UNIT})
RELEVANT = _object({"reason": REASON, "relevant": {"type": "boolean"}})

FAITHFULNESS_INSTRUCTIONS = f"""\
The trace data above holds a user's question, the context documents an AI model was given \
(numbered), and the model's answer.
1. Break the answer into its claims: each statement of fact it makes, one per item, \
self-contained, in the answer's order (at most {MAX_CLAIMS}). Greetings, questions back to \
the user and offers of help are not claims.
2. For each claim decide whether the context documents support it: supported when a \
document states it or it follows directly from what the documents state; not supported \
when the documents contradict it or do not say it, even if it is true. Judge only against \
the documents, never your own knowledge.
Answer with a JSON object {{"claims": [{{"claim": "<the claim>", "reason": "<when not \
supported: what the documents lack or contradict, one sentence; when supported: empty>", \
"supported": true or false}}]}}; an empty list when the answer makes no claim."""

RELEVANCE_INSTRUCTIONS = """\
The trace data above holds a query and the documents a retrieval step returned for it \
(numbered). For each document decide whether it is relevant to the query: relevant when \
it holds information that helps answer the query; not relevant when it is about \
something else or holds nothing the query needs. Decide each document on its own.
Answer with a JSON object with the keys {keys}; each value is \
{{"reason": "<one sentence>", "relevant": true or false}}."""

ANSWER_INSTRUCTIONS = """\
The trace data above holds a user's question and the answer an AI agent gave to it. \
Score from 0.0 to 1.0 how well the answer addresses the question: 1.0 when it answers \
what was asked, directly and completely; lower for each part of the question it leaves \
unanswered and for content nobody asked for; 0.0 when it is about something else or \
evades the question. Do not judge whether the answer is true, only whether it addresses \
the question.
Answer with a JSON object {"reason": "<one sentence>", "score": <0.0 to 1.0>}."""


def relevance_schema(numbers: Sequence[int]) -> dict[str, Any]:
    """One verdict per document shown, keyed by the number the block gives it."""
    return _object({DOCUMENT_KEY.format(number=number): RELEVANT for number in numbers})


def relevance_instructions(numbers: Sequence[int]) -> str:
    return RELEVANCE_INSTRUCTIONS.format(keys=", ".join(DOCUMENT_KEY.format(number=n) for n in numbers))


# --- the answers, read ------------------------------------------------------------------


def _checked(answer: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """The answer, validated as the judge client validates it (a cached answer read by a
    newer schema, or a caller's own, is checked the same way)."""
    if not isinstance(answer, Mapping):
        raise JudgeError("the judge's answer is not an object", MALFORMED)
    try:
        return validate(dict(answer), schema)
    except MalformedAnswer as exc:
        raise JudgeError(f"malformed answer: {exc}", MALFORMED) from None


def faithfulness_verdict(answer: Any, documents: int, seen: str = "") -> Verdict:
    """Supported claims / claims, the unsupported ones quoted with why."""
    claims = _checked(answer, FAITHFULNESS_SCHEMA)["claims"]
    unsupported = [claim for claim in claims if not claim["supported"]]
    metadata = {"documents": documents, "claims": len(claims), "unsupported": len(unsupported)}
    if not claims:
        return Verdict(1.0, NO_CLAIMS + seen, metadata)
    supported = len(claims) - len(unsupported)
    explanation = f"{supported} of {len(claims)} claims of the answer supported by the context"
    if unsupported:
        quoted = [_quoted(claim["claim"], claim["reason"]) for claim in unsupported[:QUOTED]]
        explanation += "; unsupported: " + "; ".join(quoted) + ("; ..." if len(unsupported) > QUOTED else "")
    return Verdict(supported / len(claims), explanation + seen, metadata)


def relevance_verdict(answer: Any, numbers: Sequence[int], recorded: bool, seen: str = "") -> Verdict:
    """Relevant documents / documents judged (`numbers`: those shown), the others named."""
    verdicts = _checked(answer, relevance_schema(numbers))
    judged = [(number, verdicts[DOCUMENT_KEY.format(number=number)]) for number in numbers]
    irrelevant = [(number, verdict["reason"]) for number, verdict in judged if not verdict["relevant"]]
    relevant = len(judged) - len(irrelevant)
    against = "the query" if recorded else "the user's input (the span records no query)"
    explanation = f"{relevant} of {len(judged)} documents relevant to {against}"
    if irrelevant:
        named = [_quoted(f"document {number}", reason, quote=False) for number, reason in irrelevant[:QUOTED]]
        explanation += "; not relevant: " + "; ".join(named) + ("; ..." if len(irrelevant) > QUOTED else "")
    metadata = {"documents": len(judged), "relevant": relevant}
    return Verdict(relevant / len(judged), explanation + seen, metadata)


def answer_verdict(answer: Any, seen: str = "") -> Verdict:
    """The judge's score, and its reason."""
    checked = _checked(answer, ANSWER_SCHEMA)
    reason = checked["reason"].strip() or "no reason given"
    return Verdict(float(checked["score"]), excerpt(reason, 2 * QUOTE_CHARS) + seen)


def _quoted(text: str, reason: str, quote: bool = True) -> str:
    shown = f'"{excerpt(text, QUOTE_CHARS)}"' if quote else text
    reason = reason.strip()
    return f"{shown} ({excerpt(reason, QUOTE_CHARS)})" if reason else shown


def _seen(coverage: Coverage, documents: int, bounded: int) -> str:
    """What the judge was not shown, for the explanation: "" when it saw everything."""
    parts = []
    if bounded > documents:
        parts.append(f"the first {documents} of {bounded} documents (at most {MAX_JUDGED_DOCUMENTS} a call)")
    cut = []
    if coverage.steps_shown < coverage.steps_total:
        cut.append(f"{coverage.steps_shown} of {coverage.steps_total} documents")
    if coverage.chars_shown < coverage.chars_total:
        cut.append(f"{coverage.share:.0%} of the text")
    if cut:
        parts.append(f"{', '.join(cut)} (max_field_chars, max_input_tokens)")
    return f"; the judge was shown {', '.join(parts)}" if parts else ""


# --- the calls ----------------------------------------------------------------------------


class RagJudge:
    """Asks `judge` the three questions, each call fit to `max_input_tokens`.

    Threading: immutable; the methods may be awaited concurrently, each adding what its
    call spent to the `Usage` it is given.
    """

    def __init__(
        self,
        judge: Judge,
        redaction: Redaction | None = None,
        max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
        max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
    ):
        problem = room_problem(max_input_tokens)
        if problem:
            raise ValueError(problem)
        self.judge = judge
        self.builder = PromptBuilder(redaction, max_field_chars)
        self.max_input_tokens = max_input_tokens

    async def faithfulness(self, question: str, documents: Sequence[str], answer: str, usage: Usage) -> Verdict:
        shown = list(documents[:MAX_JUDGED_DOCUMENTS])
        asked = [("question: ", question)] if question.strip() else []
        layout = self._layout(asked, "context_documents:", shown, [("answer: ", answer)])
        view = self._fit(layout, FAITHFULNESS_INSTRUCTIONS, FAITHFULNESS_SCHEMA)
        instructions, schema = FAITHFULNESS_INSTRUCTIONS, FAITHFULNESS_SCHEMA
        reply = await self._ask(view.text, instructions, schema, FAITHFULNESS_SCHEMA_NAME, usage)
        return faithfulness_verdict(reply, len(shown), _seen(view.coverage, len(shown), len(documents)))

    async def context_relevance(self, query: str, recorded: bool, documents: Sequence[str], usage: Usage) -> Verdict:
        if not documents:
            raise ValueError("context_relevance needs documents to judge")
        shown = list(documents[:MAX_JUDGED_DOCUMENTS])
        every = range(1, len(shown) + 1)
        # The room is reserved for every document's key; those left out to fit ask less.
        view = self._fit(self._layout([("query: ", query)], "documents:", shown), *self._relevance_call(every))
        numbers = [index + 1 for index in view.kept]
        instructions, schema = self._relevance_call(numbers)
        reply = await self._ask(view.text, instructions, schema, RELEVANCE_SCHEMA_NAME, usage)
        return relevance_verdict(reply, numbers, recorded, _seen(view.coverage, len(shown), len(documents)))

    async def answer_relevance(self, question: str, answer: str, usage: Usage) -> Verdict:
        layout = self._layout([("question: ", question), ("answer: ", answer)], "", [])
        view = self._fit(layout, ANSWER_INSTRUCTIONS, ANSWER_SCHEMA)
        reply = await self._ask(view.text, ANSWER_INSTRUCTIONS, ANSWER_SCHEMA, ANSWER_SCHEMA_NAME, usage)
        return answer_verdict(reply, _seen(view.coverage, 0, 0))

    @staticmethod
    def _relevance_call(numbers: Sequence[int]) -> tuple[str, dict[str, Any]]:
        return relevance_instructions(numbers), relevance_schema(numbers)

    def _layout(
        self,
        fields: Sequence[tuple[str, str]],
        documents_label: str,
        documents: Sequence[str],
        after: Sequence[tuple[str, str]] = (),
    ) -> Layout:
        """`<trace_data>`, the labelled fields, the documents numbered from 1 (each an entry
        `fit` may leave out), the fields `after` them."""
        head: list[Line] = [(TRACE_OPEN,), *((label, self.builder.redacted(text)) for label, text in fields)]
        if documents_label:
            head.append((documents_label,))
        entries = tuple(
            Entry(number, ((f"{DOCUMENT_KEY.format(number=number)}: ", self.builder.redacted(text)),))
            for number, text in enumerate(documents, 1)
        )
        tail: list[Line] = [*((label, self.builder.redacted(text)) for label, text in after), (TRACE_CLOSE,)]
        return Layout(tuple(head), entries, tuple(tail), "documents")

    def _fit(self, layout: Layout, instructions: str, schema: dict[str, Any]) -> View:
        room = self.max_input_tokens - _overhead(self.builder, instructions, schema)
        try:
            return fit(layout, self.builder.max_field_chars, room)
        except DoesNotFit as exc:
            raise JudgeError(
                f"the span's texts do not fit max_input_tokens ({self.max_input_tokens:,}): {exc}", INPUT_TOO_LARGE
            ) from None

    async def _ask(
        self, data_block: str, instructions: str, schema: dict[str, Any], schema_name: str, usage: Usage
    ) -> dict[str, Any]:
        messages = self.builder.messages(data_block, instructions)
        try:
            reply = await self.judge.complete(messages, schema, schema_name)
        except JudgeError as exc:
            usage.add_failed(exc)
            raise
        usage.add(reply)
        return reply.data


def _overhead(builder: PromptBuilder, instructions: str, schema: dict[str, Any]) -> int:
    """Estimated tokens of a call without its data block: system message, instructions, schema."""
    return prompt_tokens(builder.messages("", instructions), schema)


def room_problem(max_input_tokens: int) -> str | None:
    """Why `max_input_tokens` leaves the texts too little room beside the largest call's
    own text (the relevance call for `MAX_JUDGED_DOCUMENTS` documents), or None."""
    builder = PromptBuilder()
    every = range(1, MAX_JUDGED_DOCUMENTS + 1)
    instructions, schema = relevance_instructions(every), relevance_schema(every)
    largest = max(
        _overhead(builder, instructions, schema),
        _overhead(builder, FAITHFULNESS_INSTRUCTIONS, FAITHFULNESS_SCHEMA),
        _overhead(builder, ANSWER_INSTRUCTIONS, ANSWER_SCHEMA),
    )
    if max_input_tokens - largest >= MIN_DATA_TOKENS:
        return None
    return (
        f"max_input_tokens: {max_input_tokens:,} leaves the texts too little room: the largest judge call takes "
        f"about {largest:,} tokens without them and they need at least {MIN_DATA_TOKENS:,}; "
        f"set at least {largest + MIN_DATA_TOKENS:,}"
    )
