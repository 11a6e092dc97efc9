"""The configured LLM judge, for a plugin's metric: `spanscore.judge_from(section)`.

A plugin processor takes a `judge:` section in its config, the shape the built-in
processors take (`JudgeSection`), and asks it questions of its own:

    judge = judge_from(config.judge)               # None when no judge is configured
    answer = await judge.ask("Is the reply polite?", {"reply": text}, SCHEMA)
    answer.data                                    # the JSON answer, validated against SCHEMA

Each ask goes through what the built-in judge metrics go through: the texts are
redacted, cut to `max_field_chars`, defanged and laid inside `<trace_data>` under
spanscore's system prompt, the instructions after them (so trace content cannot pose
as instructions); the call is fit to `max_input_tokens`; the answer is checked against
the schema (a malformed one is asked again), retried, cached, budgeted and held by the
circuit breaker. What it spent comes back as an `EvaluatorUsage` of the `judge`
evaluator, to be returned among the processor's outputs (`eval.judge.*`). A failed ask
raises `JudgeFailed`, whose `outputs(metric)` are what the processor returns for it: a
skipped note when the judge's budget is spent, else an error result, and the spend.
Raw messages are not offered: they would bypass the redaction and the delimiters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spanscore.core.provenance import Provenance, revision_of
from spanscore.core.redaction import Redaction
from spanscore.core.result import DEFAULT_THRESHOLD, MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.usage import EvaluatorUsage
from spanscore.processors.judge_metrics.base import Judge, JudgeError
from spanscore.processors.judge_metrics.budget import BUDGET_EXHAUSTED
from spanscore.processors.judge_metrics.config import JudgeConfig, build_judge, judge_configured, unset_empty_strings
from spanscore.processors.judge_metrics.planner import DEFAULT_MAX_INPUT_TOKENS, INPUT_TOO_LARGE, MIN_DATA_TOKENS
from spanscore.processors.judge_metrics.prompts import (
    DEFAULT_MAX_FIELD_CHARS,
    SYSTEM_PROMPT,
    TRACE_CLOSE,
    TRACE_OPEN,
    Layout,
    Line,
    PromptBuilder,
    prompt_tokens,
)
from spanscore.processors.judge_metrics.trace_view import DoesNotFit, fit

JUDGE_EVALUATOR = "judge"  # a plugin's judge spend is counted with the judge metrics': eval.judge.*
# A data label is written into the prompt before its text: a name, never trace content.
_LABEL = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")
JudgedOutput = MetricResult | SpanAttribute | EvaluatorUsage


@dataclass(frozen=True)
class JudgeAnswer:
    """The judge's answer, validated against the schema asked with, and what it cost."""

    data: dict[str, Any]
    usage: EvaluatorUsage
    cached: bool = False


class JudgeFailed(Exception):
    """The judge gave no usable answer. `skipped`: its budget is spent (the metric is
    skipped, not failed); `error_type` names why (`timeout`, `malformed_answer`,
    `input_too_large`, ...); `usage`: the requests spent before giving up."""

    def __init__(self, message: str, error_type: str, usage: EvaluatorUsage):
        super().__init__(message)
        self.error_type = error_type
        self.usage = usage

    @property
    def skipped(self) -> bool:
        return self.error_type == BUDGET_EXHAUSTED

    def outputs(self, metric: str, threshold: float = DEFAULT_THRESHOLD) -> list[JudgedOutput]:
        """What a processor returns for `metric` in its place: `eval.<metric>.skipped`
        when the budget is spent, else an error result; and the spend, if any."""
        outputs: list[JudgedOutput] = []
        if self.skipped:
            outputs.append(SpanAttribute(result_keys(metric).skipped, str(self)))
        else:
            outputs.append(MetricResult(name=metric, threshold=threshold, error=str(self), error_type=self.error_type))
        if self.usage.calls:
            outputs.append(self.usage)
        return outputs


class PluginJudge:
    """The judge a plugin's `judge:` section describes, asked through spanscore's prompts.

    Threading: `ask` may be awaited concurrently from the event loop (the client caps
    its own concurrency); `close` once, at the processor's shutdown.
    """

    def __init__(
        self,
        config: JudgeConfig | Mapping[str, Any],
        *,
        redaction: Redaction | Mapping[str, Any] | bool | None = None,
        max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
        max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
        judge: Judge | None = None,
    ):
        if max_input_tokens < MIN_DATA_TOKENS:
            raise ValueError(f"max_input_tokens must be at least {MIN_DATA_TOKENS:,}, got {max_input_tokens:,}")
        self.config = _judge_config(config)
        self.judge = judge if judge is not None else build_judge(self.config)
        self.model = self.config.model
        self.builder = PromptBuilder(Redaction.from_config(redaction), max_field_chars)
        self.max_input_tokens = max_input_tokens

    def judges(self) -> tuple[Judge, ...]:
        """For a processor's own `judges()`, so the service reports the judge's health and spend."""
        return (self.judge,)

    def provenance(self, metric: str, *definition: object) -> Provenance:
        """The judge's model as the metric's evaluator; the revision changes with the
        model, spanscore's system prompt, the redaction and limits, and `definition`
        (the plugin's instructions, schema, settings)."""
        limits = (self.builder.max_field_chars, self.max_input_tokens, self.builder.redaction)
        return Provenance(self.model, revision_of(metric, self.model, SYSTEM_PROMPT, limits, *definition), judged=True)

    def messages(self, instructions: str, data: Mapping[str, str], schema: Mapping[str, Any]) -> list[dict[str, str]]:
        """The chat messages `ask` sends: spanscore's system prompt, then the data block
        (each text redacted, cut, defanged, under its label), then the instructions.
        Raises `JudgeFailed` (`input_too_large`) when the texts cannot fit."""
        if not instructions.strip():
            raise ValueError("instructions must say what to judge")
        for label in data:
            if not _LABEL.match(label):
                raise ValueError(f"data label {label!r} must be a lowercase identifier (a-z, 0-9, _)")
        head: list[Line] = [
            (TRACE_OPEN,),
            *((f"{label}: ", self.builder.redacted(text)) for label, text in data.items()),
        ]
        layout = Layout(tuple(head), (), ((TRACE_CLOSE,),), "fields")
        room = self.max_input_tokens - prompt_tokens(self.builder.messages("", instructions), dict(schema))
        try:
            view = fit(layout, self.builder.max_field_chars, room)
        except DoesNotFit as exc:
            usage = EvaluatorUsage(JUDGE_EVALUATOR, 0)
            message = f"the texts do not fit max_input_tokens ({self.max_input_tokens:,}): {exc}"
            raise JudgeFailed(message, INPUT_TOO_LARGE, usage) from None
        return self.builder.messages(view.text, instructions)

    async def ask(
        self, instructions: str, data: Mapping[str, str], schema: Mapping[str, Any], *, name: str = "plugin_answer"
    ) -> JudgeAnswer:
        """The judge's answer to `instructions` about the texts of `data` (label → text),
        validated against `schema` (a JSON schema of an object; `name` names it to the
        server). Raises `JudgeFailed` when no usable answer came."""
        if schema.get("type") != "object":
            raise ValueError('schema must be a JSON schema of an object ({"type": "object", ...})')
        messages = self.messages(instructions, data, schema)
        try:
            reply = await self.judge.complete(messages, dict(schema), _SCHEMA_NAME.sub("_", name)[:64] or "answer")
        except JudgeError as exc:
            raise JudgeFailed(str(exc), exc.error_type, EvaluatorUsage(JUDGE_EVALUATOR, exc.calls)) from None
        usage = EvaluatorUsage(JUDGE_EVALUATOR, reply.calls, reply.input_tokens, reply.output_tokens)
        return JudgeAnswer(reply.data, usage, reply.cached)

    async def close(self) -> None:
        await self.judge.close()


def judge_from(
    section: JudgeConfig | Mapping[str, Any] | None,
    *,
    redaction: Redaction | Mapping[str, Any] | bool | None = None,
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS,
    max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
) -> PluginJudge | None:
    """The judge a plugin's `judge:` section describes, or None when it describes none
    to call (no section, or one without an api_key or a base_url)."""
    if section is None:
        return None
    config = _judge_config(section)
    if not judge_configured(config):
        return None
    return PluginJudge(config, redaction=redaction, max_field_chars=max_field_chars, max_input_tokens=max_input_tokens)


def _judge_config(section: JudgeConfig | Mapping[str, Any]) -> JudgeConfig:
    """A `judge:` mapping read as a `JudgeSection` is: "" settings (unset variables) not given."""
    if isinstance(section, JudgeConfig):
        return section
    return JudgeConfig.model_validate(unset_empty_strings(dict(section)))


__all__ = ["JUDGE_EVALUATOR", "JudgeAnswer", "JudgeFailed", "PluginJudge", "judge_from"]
