"""`checks` processor: the user's own rules, scored without a model.

Each check is a named metric under `metrics:`, with a target (`on`, `where`,
`sample_ratio`: processors/span_target.py; `on: trace` by default) and exactly one check
key. The text checks read a `field` of the scored span:

- `input` / `output`: on `trace`, the run's user input and final output; on `llm`, the
  prompt (its messages' text) and the answer; on `tool`, the arguments and the result;
  on `retrieval`, the query and the documents; on `agent`, the agent span's input and output;
- `context`: the retrieved documents, joined: on `trace`, every retrieval's; on `llm`,
  those of the retrievals that ended before the call started (as rag_metrics' faithfulness
  reads them); on `retrieval`, its own;
- `attributes.KEY`: the span's attribute KEY (on `trace`, the root span's).

The checks: `regex` (the field matches), `not_regex` (it does not), `json_schema` (it
parses as JSON and satisfies the schema), `no_pii` (the redaction's built-in detectors
find no e-mail address, card number, API key, token, private key or secret-named value),
`contains` / `equals` (the field holds, or is, the answer the eval suite's dataset
expects of the trace's turn: `contains: expected_output`, on `trace` only, with the
processor's `dataset`; both texts Unicode-normalized (NFC), whitespace runs read as one
space and the ends trimmed, case kept unless `ignore_case: true`; a trace that joins no
case, or whose turn has no expected response, is skipped with the reason:
processors/expected_output.py), and, on the span itself rather than a field:
`max_duration`, `max_tokens` (the usage the span records; on `trace` the sum over its
model calls), `tool_error_rate` (on `trace`: the share of its tool spans that failed, by
failure_localization's `error_status` reading).

`on: session` checks the session when it closes, over the turns its traces left (each
trace's part is kept in the session's state as it is scored; the result goes on the
session's carrier): a text check reads each turn's field as `on: trace` reads it and
passes when every turn that records the field passes, naming the first that failed;
`max_duration` is the session's span of time, from its first trace's start to its last
trace's end; `max_tokens` sums every turn's model calls; `tool_error_rate` is the share of
all the session's tool spans that failed. A trace without a session is no turn.

A result scores 1 (pass) or 0 (fail), threshold 0.5, and says what was checked and what
was found. A span without the field (or the usage, or a trace without tool spans) gets
no result: there is nothing to check. Text is cut to `MAX_CHECKED_CHARS` before a check
reads it; the cut is stated in the explanation.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints, ValidationInfo, field_validator, model_validator

from spanscore.core.component import ComponentConfig, ComponentFactory
from spanscore.core.durations import Duration, format_duration
from spanscore.core.provenance import CODE, Provenance, revision_of
from spanscore.core.quoting import excerpt
from spanscore.core.redaction import API_KEY, CARD, EMAIL, PRIVATE_KEY, SECRET, TOKEN, Redaction
from spanscore.core.result import MetricResult
from spanscore.core.score_encoding import result_keys
from spanscore.core.session import Session
from spanscore.core.span_attribute import SpanAttribute
from spanscore.core.trace import Trace
from spanscore.processors.agent_trace import AgentTrace, SpanView, SpanViews, Step, agent_trace_of, span_views_of
from spanscore.processors.agent_trace.spans import AGENT, LLM, RETRIEVAL, TOOL
from spanscore.processors.base import Processor, SessionOutput, TraceOutput
from spanscore.processors.expected_output import (
    DEFAULT_CASE_KEY,
    CaseKey,
    DatasetFile,
    DatasetSetting,
    ExpectedOutput,
    ExpectedOutputs,
)
from spanscore.processors.judge_metrics.answers import MalformedAnswer, validate
from spanscore.processors.localization.evidence import span_failure
from spanscore.processors.span_target import SpanTarget

THRESHOLD = 0.5  # a check scores 0 or 1
MAX_CHECKED_CHARS = 100_000  # of a field's text, read by a regex, the JSON parser or the detectors
QUOTE_CHARS = 120  # of a match or an error, quoted in an explanation
MAX_FAILED_TOOLS_NAMED = 5

EXPECTED_CHECKS = ("contains", "equals")  # against the dataset's expected output
TEXT_CHECKS = ("regex", "not_regex", "json_schema", "no_pii", *EXPECTED_CHECKS)
SPAN_CHECKS = ("max_duration", "max_tokens", "tool_error_rate")
CHECKS = TEXT_CHECKS + SPAN_CHECKS
FIELDS = ("input", "output", "context")
ATTRIBUTES = "attributes."
SESSION = "session"
EXPECTED_OUTPUT = "expected_output"  # what contains and equals compare with

# The JSON Schema keywords `judge_metrics.answers.validate` checks, and those that only
# describe. Any other is refused at config time rather than silently not checked.
SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
    }
)
SCHEMA_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples"})
SCHEMA_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})

# Token usage as the conventions record it on a model call's span: a total, else the
# first pair (input, output) of which either is present.
TOTAL_TOKEN_KEYS = ("llm.token_count.total", "gen_ai.usage.total_tokens")
TOKEN_PAIRS = (
    ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),  # OpenTelemetry GenAI
    ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),  # GenAI before 1.27, OpenLLMetry
    ("llm.token_count.prompt", "llm.token_count.completion"),  # OpenInference
    ("ai.usage.inputTokens", "ai.usage.outputTokens"),  # Vercel AI SDK 5
    ("ai.usage.promptTokens", "ai.usage.completionTokens"),  # Vercel AI SDK 4
)

# What the redaction's built-in detectors put in place of what they found, by kind.
PII_MARKERS = (
    (EMAIL, "e-mail address", "e-mail addresses"),
    (CARD, "card number", "card numbers"),
    (API_KEY, "API key", "API keys"),
    (TOKEN, "token", "tokens"),
    (PRIVATE_KEY, "private key", "private keys"),
    (SECRET, "secret-named value", "secret-named values"),
)
_DETECTORS = Redaction()


class ToolErrorRate(ComponentConfig):
    max: float = Field(ge=0.0, le=1.0)  # the share of failed tool spans that still passes


@dataclass(frozen=True)
class _ExpectedReference:
    """A `contains` / `equals` value as written under `metrics.<metric>`, and whether the
    processor has a dataset to take the expected output from."""

    value: Any
    has_dataset: bool

    def __repr__(self) -> str:  # as a config problem quotes it: the value as written
        return repr(self.value)


def _expected_reference(value: Any) -> Any:
    if isinstance(value, _ExpectedReference):
        if not value.has_dataset:
            raise ValueError(
                "compares with the dataset's expected output: give the checks processor a dataset "
                "(an eval suite's cases, as ground_truth reads them)"
            )
        value = value.value
    if value is not None and value != EXPECTED_OUTPUT:
        raise ValueError(
            f"expected {EXPECTED_OUTPUT} (the answer the dataset expects of the trace's turn); "
            "for a fixed text use regex"
        )
    return value


class CheckSettings(SpanTarget):
    """One check: its target, the field it reads, and exactly one check key."""

    field: str | None = None
    regex: str | None = None
    not_regex: str | None = None
    json_schema: dict[str, Any] | None = None
    no_pii: bool | None = None
    max_duration: Duration | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=0)
    tool_error_rate: ToolErrorRate | None = None
    contains: Annotated[str | None, BeforeValidator(_expected_reference)] = None
    equals: Annotated[str | None, BeforeValidator(_expected_reference)] = None
    ignore_case: bool | None = None  # contains and equals: compare case-insensitively

    @field_validator("field")
    @classmethod
    def _known_field(cls, value: str | None) -> str | None:
        if value is None or value in FIELDS or (value.startswith(ATTRIBUTES) and len(value) > len(ATTRIBUTES)):
            return value
        raise ValueError("not a field: use input, output, context or attributes.KEY")

    @field_validator("regex", "not_regex")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {excerpt(pattern)}: {exc}") from None
        return pattern

    @field_validator("json_schema")
    @classmethod
    def _readable_schema(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            problem = schema_problem(schema, "$")
            if problem:
                raise ValueError(problem)
        return schema

    @field_validator("no_pii")
    @classmethod
    def _no_pii_true(cls, value: bool | None) -> bool | None:
        if value is False:
            raise ValueError("no_pii: true is the check; leave the metric out to not check")
        return value

    @model_validator(mode="after")
    def _one_check(self) -> CheckSettings:
        given = [name for name in CHECKS if getattr(self, name) is not None]
        if len(given) != 1:
            found = f"got {', '.join(given)}" if given else "got none"
            raise ValueError(f"give exactly one check of {', '.join(CHECKS)}; {found}")
        check = given[0]
        if check in TEXT_CHECKS:
            self._field_readable(check)
        elif self.field is not None:
            raise ValueError(f"{check} reads the span itself: leave field out")
        if check == "tool_error_rate" and self.on not in ("trace", SESSION):
            raise ValueError("tool_error_rate is a share of a run's tool spans: it takes on: trace or on: session")
        if check == "max_tokens" and self.on not in ("trace", LLM, SESSION):
            raise ValueError("max_tokens reads model calls' usage: it takes on: trace, llm or session")
        if check in EXPECTED_CHECKS and self.on != "trace":
            raise ValueError(f"{check} compares with the answer expected of a turn, the trace's: it takes on: trace")
        if self.ignore_case is not None and check not in EXPECTED_CHECKS:
            raise ValueError("ignore_case belongs to contains and equals (for a regex, write (?i))")
        return self

    def _field_readable(self, check: str) -> None:
        if self.field is None:
            raise ValueError(f"{check} checks a field: give field: input, output, context or attributes.KEY")
        if self.field == "context" and self.on not in ("trace", SESSION, LLM, RETRIEVAL):
            raise ValueError(f"on: {self.on} has no context: field context takes on: trace, session, llm or retrieval")

    @property
    def check(self) -> str:
        return next(name for name in CHECKS if getattr(self, name) is not None)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.regex if self.regex is not None else self.not_regex or "")


def schema_problem(schema: Any, path: str) -> str | None:
    """Why `validate` could not check `schema` as written (a keyword it does not know, a
    malformed value), or None."""
    if not isinstance(schema, dict):
        return f"json_schema at {path}: expected an object, got {type(schema).__name__}"
    unknown = sorted(set(schema) - SCHEMA_KEYWORDS - SCHEMA_ANNOTATIONS)
    if unknown:
        return (
            f"json_schema at {path}: {', '.join(map(repr, unknown))} not supported "
            f"(checked: {', '.join(sorted(SCHEMA_KEYWORDS))})"
        )
    kinds = schema.get("type")
    for kind in [kinds] if isinstance(kinds, str) or kinds is None else kinds:
        if kind is not None and kind not in SCHEMA_TYPES:
            return f"json_schema at {path}: unknown type {excerpt(str(kind))}"
    if schema.get("additionalProperties") is False:
        # validate() drops the extra keys of a judge's answer; a check must not let them pass.
        return f"json_schema at {path}: additionalProperties: false is not supported (extra keys would pass)"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
        return f"json_schema at {path}: required must be a list of names"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        return f"json_schema at {path}: properties must be an object"
    inner = [(f"{path}.{key}", value) for key, value in properties.items()]
    for keyword in ("items", "additionalProperties"):
        if isinstance(schema.get(keyword), dict) or (keyword == "items" and keyword in schema):
            inner.append((f"{path}.{keyword}", schema[keyword]))
    for inner_path, inner_schema in inner:
        problem = schema_problem(inner_schema, inner_path)
        if problem:
            return problem
    return None


MetricName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$")]  # as MetricResult.name


class ChecksConfig(ComponentConfig):
    dataset: DatasetSetting | None = None  # an eval suite's cases: the expected outputs contains and equals read
    case_key: CaseKey = DEFAULT_CASE_KEY
    metrics: dict[MetricName, CheckSettings] = Field(default_factory=dict)

    @field_validator("metrics", mode="before")
    @classmethod
    def _expected_needs_a_dataset(cls, value: Any, info: ValidationInfo) -> Any:
        # Checked at the metric's key; a dataset that failed to load has its own problem.
        if not isinstance(value, dict):
            return value
        has_dataset = info.data.get("dataset", "invalid") is not None
        marked = {}
        for name, settings in value.items():
            if isinstance(settings, dict):
                settings = {
                    key: _ExpectedReference(item, has_dataset) if key in EXPECTED_CHECKS else item
                    for key, item in settings.items()
                }
            marked[name] = settings
        return marked

    @property
    def expected_metrics(self) -> tuple[str, ...]:
        """The metrics comparing with the dataset's expected output."""
        return tuple(name for name, settings in self.metrics.items() if settings.check in EXPECTED_CHECKS)


@dataclass(frozen=True)
class Subject:
    """What one check reads: the scored span's id (None: the trace, scored on its root),
    its view (None when the conventions did not read it) and its step (for llm, tool and
    retrieval targets)."""

    span_id: str | None
    view: SpanView | None
    step: Step | None


class Checks(Processor):
    def __init__(self, component_id: str, config: ChecksConfig):
        self.id = component_id
        self.config = config
        self.metric_names = tuple(config.metrics)
        self.expected: ExpectedOutputs | None = None
        if config.expected_metrics:
            assert isinstance(config.dataset, DatasetFile)  # the config requires it
            self.expected = ExpectedOutputs(config.dataset.loaded, config.case_key, f"{component_id}.expected_output")

    def provenance(self, metric_name: str) -> Provenance:
        # Which spans are checked (on, where, sample_ratio) is no part of how each is checked.
        settings = self.config.metrics[metric_name].model_dump(exclude=set(SpanTarget.model_fields))
        if self.config.metrics[metric_name].on == SESSION:  # every turn's verdicts, combined: another reading
            settings["on"] = SESSION
        if self.expected is not None and metric_name in self.config.expected_metrics:
            # The expected outputs are what the field is checked against: a changed dataset is a new revision.
            return Provenance(
                CODE, revision_of(metric_name, CODE, settings, self.expected.dataset.model_dump(mode="json"))
            )
        return Provenance(CODE, revision_of(metric_name, CODE, settings))

    @property
    def session_metric_names(self) -> tuple[str, ...]:
        return tuple(name for name, settings in self.config.metrics.items() if settings.on == SESSION)

    @property
    def uses_sessions(self) -> bool:
        # A trace's turn, and so its expected output, is its place in its session.
        return self.expected is not None or bool(self.session_metric_names)

    async def process_trace(self, trace: Trace, session: Session | None) -> Sequence[TraceOutput]:
        outputs: list[TraceOutput] = []
        turn: dict[str, TurnPart | Exception] = {}
        expected = self.expected.of(trace, session) if self.expected is not None else None
        for name, settings in self.config.metrics.items():
            try:
                if settings.on == SESSION:
                    if session is not None:
                        turn[name] = turn_part(settings, trace)
                    continue
                outputs.extend(check_trace(name, settings, trace, expected))
            except Exception as exc:  # one check's bug must not cost the others their results
                if settings.on == SESSION:
                    turn[name] = exc  # the session's result says so when it closes
                else:
                    outputs.append(MetricResult.failure(name, exc, THRESHOLD))
        if turn and session is not None:
            session.state.setdefault(self.id, []).append(turn)
        return outputs

    async def process_session(self, session: Session) -> Sequence[SessionOutput]:
        turns: list[dict[str, TurnPart | Exception]] = session.state.pop(self.id, None) or []
        outputs: list[SessionOutput] = []
        for name in self.session_metric_names:
            try:
                result = check_session(name, self.config.metrics[name], [turn.get(name) for turn in turns])
            except Exception as exc:
                result = MetricResult.failure(name, exc, THRESHOLD)
            if result is not None:
                outputs.append(result)
        return outputs


def check_trace(
    name: str, settings: CheckSettings, trace: Trace, expected: ExpectedOutput | str | None = None
) -> list[MetricResult | SpanAttribute]:
    """The results of check `name` on `trace`: one per span it targets, or one on the root.
    `expected`: the trace's expected output, or why it has none, for contains and equals."""
    if settings.check in EXPECTED_CHECKS and not isinstance(expected, ExpectedOutput):
        why = expected if isinstance(expected, str) else "no expected output: the processor has no dataset"
        return [SpanAttribute(result_keys(name).skipped, why)]
    views = span_views_of(trace)
    by_id = {} if views is None else views.by_id
    run = agent_trace_of(trace)
    if settings.on == "trace":
        anchor = trace.anchor
        view = None if anchor is None else by_id.get(anchor.span_id.hex())
        subjects = [Subject(None, view, None)]
    elif settings.on == AGENT:
        subjects = [Subject(span_id, by_id.get(span_id), None) for span_id in settings.span_ids(trace)]
    else:
        subjects = [Subject(step.span_id, by_id.get(step.span_id), step) for step in settings.select(trace)]
    results: list[MetricResult | SpanAttribute] = []
    for subject in subjects:
        result = _check(name, settings, subject, run, views, expected)
        if result is not None:
            results.append(result)
    return results


def _check(
    name: str,
    settings: CheckSettings,
    subject: Subject,
    run: AgentTrace,
    views: SpanViews | None,
    expected: ExpectedOutput | str | None = None,
) -> MetricResult | None:
    check = settings.check
    if check in TEXT_CHECKS:
        field = settings.field or ""
        text = field_text(field, settings.on, subject, run)
        if text is None:
            return None
        cut = len(text) > MAX_CHECKED_CHARS
        checked = text[:MAX_CHECKED_CHARS] if cut else text
        if isinstance(expected, ExpectedOutput) and check in EXPECTED_CHECKS:
            verdict = _against_expected(settings, field, checked, expected)
        else:
            verdict = _TEXT_CHECKS[check](settings, field, checked)
        if verdict is not None and cut:
            passed, explanation = verdict
            verdict = passed, f"{explanation} (its first {MAX_CHECKED_CHARS:,} of {len(text):,} characters checked)"
    elif check == "max_duration":
        verdict = _duration(settings, subject)
    elif check == "max_tokens":
        verdict = _tokens(settings, subject, run, views)
    else:
        verdict = _tool_error_rate(settings, run, views)
    return _result(name, check, verdict, subject.span_id)


def _result(name: str, check: str, verdict: Verdict, span_id: str | None = None) -> MetricResult | None:
    """A check's result from its verdict; None when it did not apply."""
    if verdict is None:
        return None
    passed, explanation = verdict
    return MetricResult(
        name=name,
        score=1.0 if passed else 0.0,
        threshold=THRESHOLD,
        explanation=explanation,
        span_id=span_id,
        metadata={"check": check},
    )


# -- fields ----------------------------------------------------------------------------
def field_text(field: str, on: str, subject: Subject, run: AgentTrace) -> str | None:
    """The text of `field` on the subject, or None when the span does not record it."""
    if field.startswith(ATTRIBUTES):
        if subject.view is None:
            return None
        return _as_text(subject.view.attrs.get(field[len(ATTRIBUTES) :]))
    step = subject.step
    if on in ("trace", SESSION):  # a session's turn is read as its trace
        if field == "context":
            return _documents([d.content for s in run.retrieval_steps for d in s.documents])
        return (run.user_input if field == "input" else run.final_output) or None
    if on == AGENT:
        view = subject.view
        return None if view is None else _as_text(view.input if field == "input" else view.output)
    if step is None:
        return None
    if step.kind == LLM:
        if field == "input":
            return "\n".join(m.content for m in step.input_messages if m.content) or None
        if field == "output":
            return step.result or None
        before = [s for s in run.retrieval_steps if s.end_time_unix_nano <= step.start_time_unix_nano]
        return _documents([d.content for s in before for d in s.documents])
    if step.kind == TOOL:
        return _as_text(step.arguments if field == "input" else step.result)
    if field == "input":
        return step.query or None
    return _documents([d.content for d in step.documents])


def _as_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _documents(contents: list[str]) -> str | None:
    return "\n\n".join(content for content in contents if content) or None


# -- the checks ------------------------------------------------------------------------
Verdict = tuple[bool, str] | None


def _regex(settings: CheckSettings, field: str, text: str) -> Verdict:
    pattern = settings.pattern
    match = pattern.search(text)
    wanted = settings.regex is not None
    shown = excerpt(pattern.pattern, QUOTE_CHARS)
    if match is None:
        return not wanted, f"{field} ({len(text):,} characters) has no match of /{shown}/"
    return wanted, f"{field} matches /{shown}/ at character {match.start():,}: {excerpt(match.group(), QUOTE_CHARS)}"


def _json_schema(settings: CheckSettings, field: str, text: str) -> Verdict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return False, f"{field} is not JSON: {excerpt(str(exc), QUOTE_CHARS)}"
    except RecursionError:
        return False, f"{field} is not JSON this parser reads: nested too deeply"
    try:
        validate(value, settings.json_schema or {})
    except MalformedAnswer as exc:
        return False, f"{field} does not satisfy the schema: {excerpt(str(exc), QUOTE_CHARS)}"
    return True, f"{field} is JSON satisfying the schema"


def _no_pii(settings: CheckSettings, field: str, text: str) -> Verdict:
    redacted = _DETECTORS.text(text)
    if redacted == text:  # text holding no secret shape comes back as it came
        return (
            True,
            f"{field} ({len(text):,} characters) holds no e-mail address, card number, API key, token or secret",
        )
    found = []
    for marker, one, many in PII_MARKERS:
        count = redacted.count(marker) - text.count(marker)
        if count > 0:
            found.append(f"{count} {one if count == 1 else many}")
    if not found:  # the detectors changed the text without a marker of theirs: say so rather than guess
        found.append("a secret")
    return False, f"{field} holds {', '.join(found)}"


def comparable(text: str, ignore_case: bool) -> str:
    """`text` as contains and equals compare it: NFC, whitespace runs as one space, the ends
    trimmed, casefolded when case is ignored."""
    text = " ".join(unicodedata.normalize("NFC", text).split())
    return text.casefold() if ignore_case else text


def _against_expected(settings: CheckSettings, field: str, text: str, expected: ExpectedOutput) -> Verdict:
    ignore_case = bool(settings.ignore_case)
    actual, wanted = comparable(text, ignore_case), comparable(expected.text, ignore_case)
    how = "whitespace collapsed" + (", case ignored" if ignore_case else "")
    quoted = excerpt(expected.text, QUOTE_CHARS)
    if settings.equals is not None:
        if actual == wanted:
            return True, f"{field} equals the expected output of {expected.source} ({how})"
        at = next((i for i, (a, b) in enumerate(zip(actual, wanted)) if a != b), min(len(actual), len(wanted)))
        return False, (
            f"{field} differs from the expected output of {expected.source} at character {at:,} ({how}): "
            f"expected {quoted}, got {excerpt(text, QUOTE_CHARS)}"
        )
    # Positions are in the texts as compared.
    found = actual.find(wanted)
    if found >= 0:
        return True, f"{field} contains the expected output of {expected.source} at character {found:,} ({how})"
    missing = f"does not contain the expected output of {expected.source} ({how})"
    return False, f"{field} ({len(text):,} characters) {missing}: {quoted}"


_TEXT_CHECKS: dict[str, Callable[[CheckSettings, str, str], Verdict]] = {
    "regex": _regex,
    "not_regex": _regex,
    "json_schema": _json_schema,
    "no_pii": _no_pii,
}


def _duration(settings: CheckSettings, subject: Subject) -> Verdict:
    view = subject.view
    if view is None or view.end <= 0 or view.end < view.start:
        return None
    seconds = (view.end - view.start) / 1e9
    limit = settings.max_duration or 0.0
    what = "the span" if subject.span_id else "the root span"
    verdict = "within" if seconds <= limit else "over"
    return seconds <= limit, f"{what} took {format_duration(seconds)}, {verdict} the max {format_duration(limit)}"


def span_tokens(view: SpanView) -> int | None:
    """The tokens a model call's span records it used (input and output), or None."""
    attrs = view.attrs
    for key in TOTAL_TOKEN_KEYS:
        total = _count(attrs.get(key))
        if total is not None:
            return total
    for input_key, output_key in TOKEN_PAIRS:
        used = [_count(attrs.get(input_key)), _count(attrs.get(output_key))]
        if used != [None, None]:
            return sum(n for n in used if n is not None)
    return None


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        count = int(value)
    except (ValueError, OverflowError):
        return None
    return count if count >= 0 else None


def _tokens(settings: CheckSettings, subject: Subject, run: AgentTrace, views: SpanViews | None) -> Verdict:
    limit = settings.max_tokens or 0
    if subject.span_id is not None:
        used = None if subject.view is None else span_tokens(subject.view)
        if used is None:
            return None
        what = "the model call"
    else:
        recorded = run_tokens(run, views)
        if not recorded:
            return None
        used = sum(recorded)
        what = f"the run's {len(recorded)} model call{'s' if len(recorded) > 1 else ''}"
    verdict = "within" if used <= limit else "over"
    return used <= limit, f"{what} used {used:,} tokens, {verdict} the max {limit:,}"


def run_tokens(run: AgentTrace, views: SpanViews | None) -> list[int]:
    """The tokens each of the run's model calls records, of those that record any."""
    by_id = {} if views is None else views.by_id
    counts = [span_tokens(by_id[step.span_id]) for step in run.llm_steps if step.from_span and step.span_id in by_id]
    return [n for n in counts if n is not None]


def tool_calls(run: AgentTrace, views: SpanViews | None) -> tuple[int, list[str]]:
    """How many tool spans the run has, and the names of those that failed, in order."""
    by_id = {} if views is None else views.by_id
    calls = [(step, by_id[step.span_id]) for step in run.tool_steps if step.from_span and step.span_id in by_id]
    return len(calls), [step.name for step, view in calls if span_failure(view) is not None]


def _tool_error_rate(settings: CheckSettings, run: AgentTrace, views: SpanViews | None) -> Verdict:
    return _error_rate(settings, *tool_calls(run, views), "")


def _error_rate(settings: CheckSettings, calls: int, failed: list[str], where: str) -> Verdict:
    if not calls:
        return None
    rate = len(failed) / calls
    limit = settings.tool_error_rate.max if settings.tool_error_rate is not None else 0.0
    verdict = "within" if rate <= limit else "over"
    explanation = f"{len(failed)} of {calls} tool calls{where} failed ({rate:.0%}), {verdict} the max {limit:.0%}"
    if failed:
        named = ", ".join(excerpt(name, 60) for name in failed[:MAX_FAILED_TOOLS_NAMED])
        more = f" and {len(failed) - MAX_FAILED_TOOLS_NAMED} more" if len(failed) > MAX_FAILED_TOOLS_NAMED else ""
        explanation += f": {named}{more}"
    return rate <= limit, explanation


# -- on: session -------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnPart:
    """What one trace of a session leaves a session check: its verdict on the field (text
    checks; None when the turn does not record it), its root's start and end, its model
    calls' token counts, its tool calls and the names of those that failed."""

    verdict: tuple[bool, str] | None = None
    start: int = 0
    end: int = 0
    tokens: tuple[int, ...] = ()
    tool_calls: int = 0
    failed_tools: tuple[str, ...] = ()


def turn_part(settings: CheckSettings, trace: Trace) -> TurnPart:
    """What `trace`, a turn of its session, gives the session check `settings`."""
    views = span_views_of(trace)
    run = agent_trace_of(trace)
    check = settings.check
    if check in TEXT_CHECKS:
        anchor = trace.anchor
        view = None if anchor is None or views is None else views.by_id.get(anchor.span_id.hex())
        result = _check("turn", settings, Subject(None, view, None), run, views)
        return TurnPart(verdict=None if result is None else (bool(result.passed), result.explanation or ""))
    if check == "max_duration":
        anchor = trace.anchor
        if anchor is None or anchor.end_time_unix_nano < anchor.start_time_unix_nano:
            return TurnPart()
        return TurnPart(start=anchor.start_time_unix_nano, end=anchor.end_time_unix_nano)
    if check == "max_tokens":
        return TurnPart(tokens=tuple(run_tokens(run, views)))
    calls, failed = tool_calls(run, views)
    return TurnPart(tool_calls=calls, failed_tools=tuple(failed))


def check_session(
    name: str, settings: CheckSettings, turns: Sequence[TurnPart | Exception | None]
) -> MetricResult | None:
    """The result of session check `name` over its turns' parts, in the order they were
    scored (None: a turn with no part), or None when no turn gave anything to check."""
    failure = next((part for part in turns if isinstance(part, Exception)), None)
    if failure is not None:
        return MetricResult.failure(name, failure, THRESHOLD)
    parts = [(number, part) for number, part in enumerate(turns, 1) if isinstance(part, TurnPart)]
    check = settings.check
    if check in TEXT_CHECKS:
        verdict = _every_turn(settings.field or "", [(n, p.verdict) for n, p in parts if p.verdict is not None])
    elif check == "max_duration":
        verdict = _session_duration(settings, [p for _, p in parts if p.end > 0])
    elif check == "max_tokens":
        recorded = [n for _, p in parts for n in p.tokens]
        verdict = _session_tokens(settings, recorded)
    else:
        calls = sum(p.tool_calls for _, p in parts)
        verdict = _error_rate(settings, calls, [tool for _, p in parts for tool in p.failed_tools], " in the session")
    return _result(name, check, verdict)


def _every_turn(field: str, verdicts: list[tuple[int, tuple[bool, str]]]) -> Verdict:
    if not verdicts:
        return None
    failed = [(number, explanation) for number, (passed, explanation) in verdicts if not passed]
    turns = f"{len(verdicts)} turn{'s' if len(verdicts) != 1 else ''} recording {field}"
    if not failed:
        every = f"the {turns} passes" if len(verdicts) == 1 else f"all {turns} pass"
        return True, f"{every}; turn {verdicts[-1][0]}: {verdicts[-1][1][1]}"
    number, explanation = failed[0]
    return False, f"{len(failed)} of the {turns} fail; turn {number}: {explanation}"


def _session_duration(settings: CheckSettings, parts: list[TurnPart]) -> Verdict:
    if not parts:
        return None
    seconds = (max(p.end for p in parts) - min(p.start for p in parts)) / 1e9
    limit = settings.max_duration or 0.0
    verdict = "within" if seconds <= limit else "over"
    traces = f"{len(parts)} trace{'s' if len(parts) != 1 else ''}"
    return seconds <= limit, (
        f"the session's {traces} took {format_duration(seconds)} from the first start to the last end, "
        f"{verdict} the max {format_duration(limit)}"
    )


def _session_tokens(settings: CheckSettings, recorded: list[int]) -> Verdict:
    if not recorded:
        return None
    limit, used = settings.max_tokens or 0, sum(recorded)
    verdict = "within" if used <= limit else "over"
    calls = f"{len(recorded)} model call{'s' if len(recorded) != 1 else ''}"
    return used <= limit, f"the session's {calls} used {used:,} tokens, {verdict} the max {limit:,}"


FACTORY = ComponentFactory("processor", "checks", ChecksConfig, Checks)
