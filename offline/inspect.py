"""`spanscore inspect`: what the metrics would read from recorded spans.

A score is only as good as what the metrics were given. When a judge says 0.2, or no
score appears at all, the first question is what the spans held: did the normalizer find
the user's question, the final answer, the tool calls? This reads OTLP/JSON files (the
`file` exporter's lines, or one request per file as `examples/` holds), assembles them as
the collector does and prints, per trace, the normalized agent view the metrics read and
whether the trace would be scored.

Everything comes from the collector's own parts, so the answer is the collector's: spans
are grouped by the `Assembler` (across lines and files, in first-seen order, invalid ids
rejected), the session id is its `session_id_of` with the configured `session_keys`, and
"would be scored" is the pipeline's `ScoreScope`, from `--config` when given, else the
defaults. Nothing is scored and nothing is sent.

A scored file may hold results on spans other than the root (a span-level metric's):
they are shown under the step whose span they are on, the metric's roll-up with the
root's scores. It may hold failure_localization's findings: each blamed span is marked
under the step it belongs to (the step's own span, or the nearest step span above it,
such as the tool call above a failed HTTP request), so the error shows where the agent
view shows the work; a blamed span under no step is listed with the trace.

Files are read by `otlp_files` (OTLP/JSON lines or one document, Jaeger's and Tempo's
JSON, gzip), whose formats the summary names; a broken line is reported with its file and
line number, and reading goes on; any problem makes the exit code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from spanscore.core.attributes import any_value_to_python
from spanscore.core.quoting import excerpt
from spanscore.core.score_encoding import parse_key
from spanscore.core.trace import Trace
from spanscore.core.wording import counted
from spanscore.offline.blamed_spans import Blamed, blamed_in, group_words, localization_of
from spanscore.offline.otlp_files import formats_text, read_requests
from spanscore.offline.reading_bounds import shown_problems
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.score_scope import SESSION_CARRIER, ScoreScope
from spanscore.pipeline.settings import PipelineSettings
from spanscore.processors.agent_trace import Document, Step, agent_trace_of

EXIT_PROBLEMS = 2
SHORT_TEXT = 80  # characters of a text shown in the human format before an ellipsis
BLAME_CHARS = 120  # of a blamed span's explanation in the human format
SUMMARY_CHARS = 200  # of failure_localization's explanation on the root
SHOWN_DOCUMENTS = 3  # of a retrieval step's documents, in both formats
DOCUMENT_CHARS = 500  # of a shown document's content in the JSON format (SHORT_TEXT in the human one)
_SCORE_FIELDS = ("score", "label", "error")


@dataclass
class Inspection:
    """The traces found in some files, and every problem met reading them."""

    traces: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    files: int = 0
    formats: list[str] = field(default_factory=list)  # each format read, once


def inspect_files(paths: Sequence[str | Path], assembler_config: PipelineSettings | None = None) -> Inspection:
    """Read every file, assemble the spans into traces and describe each trace."""
    config = assembler_config or PipelineSettings()
    assembler = Assembler(config)
    scope = ScoreScope(config.score)
    inspection = Inspection()
    for path in paths:
        inspection.files += 1
        for where, request in read_requests(Path(path), inspection.problems, formats=inspection.formats):
            outcome = assembler.add(request, 0.0)
            if outcome.rejected:
                inspection.problems.append(f"{where}: {outcome.rejected} span(s) rejected: {outcome.error}")
    for trace in assembler.pop_all():
        inspection.traces.append(describe(trace, scope))
        trace.release_derived()
    return inspection


def describe(trace: Trace, scope: ScoreScope) -> dict[str, Any]:
    """One trace as the metrics see it, as JSON-ready values (full texts)."""
    anchor = trace.anchor
    skip = scope.skip_reason(trace)
    record: dict[str, Any] = {
        "trace_id": trace.trace_id_hex,
        "kind": "session_carrier" if skip is SESSION_CARRIER else "trace",
        "service": trace.service_name,
        "root": None if anchor is None else anchor.name,
        "complete": trace.complete,
        "spans": trace.span_count,
        "session_id": trace.session_id,
        "scored": skip is None,
        "not_scored_because": skip,
    }
    if skip is SESSION_CARRIER:
        # A report spanscore wrote, not an agent's work: its links and results, no agent view.
        record["linked_traces"] = [link.trace_id.hex() for link in anchor.links] if anchor is not None else []
    else:
        agent = agent_trace_of(trace)
        record.update(
            recognized=agent.recognized,
            conventions=sorted(agent.conventions),
            agent_name=agent.agent_name,
            user_input=agent.user_input,
            final_output=agent.final_output,
            steps=[_step(step) for step in agent.steps],
        )
        _add_step_scores(record, trace, agent.steps)
        _add_blames(record, trace, agent.steps)
    record["scores"] = _scores(anchor)
    return record


def run(
    paths: Sequence[str],
    as_json: bool,
    assembler_config: PipelineSettings | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """The `inspect` command: traces to `out`, problems to `err`; 0, or 2 on any problem."""
    stdout: TextIO = out or sys.stdout  # declared: typeshed types sys.stdout partly as Any
    err = err or sys.stderr
    inspection = inspect_files(paths, assembler_config)
    for line in shown_problems(inspection.problems):
        print(f"spanscore inspect: {line}", file=err)
    for record in inspection.traces:
        if as_json:
            stdout.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        else:
            stdout.write("\n".join(human_lines(record)) + "\n\n")
    # Nothing read for want of a readable file: the problems say it all, no "0 traces".
    if not as_json and (inspection.traces or not inspection.problems):
        scored = sum(1 for record in inspection.traces if record["scored"])
        formats = f" ({formats_text(inspection.formats)})" if inspection.formats else ""
        stdout.write(
            f"{counted(len(inspection.traces), 'trace')} in {counted(inspection.files, 'file')}{formats}; "
            f"{scored} would be scored\n"
        )
    stdout.flush()
    return EXIT_PROBLEMS if inspection.problems else 0


# Describing ------------------------------------------------------------------------------


def _step(step: Step) -> dict[str, Any]:
    described = {
        "kind": step.kind,
        "name": step.name,
        "arguments": step.arguments,
        "result": step.result,
        "error": step.error,
    }
    if step.kind == "retrieval":
        # Bounded even here: a retriever may return thousands of documents.
        described.update(
            query=step.query,
            document_count=step.document_count,
            documents=[_document(document) for document in step.documents[:SHOWN_DOCUMENTS]],
        )
    return described


def _document(document: Document) -> dict[str, Any]:
    return {
        "id": document.id,
        "score": document.score,
        "content": document.content[:DOCUMENT_CHARS],
        "content_chars": document.content_chars,
        "metadata": document.metadata,
    }


def _add_step_scores(record: dict[str, Any], trace: Trace, steps: Sequence[Step]) -> None:
    """A span-level metric's results, under the step whose span they are on (`scores`,
    only on a step whose own span has some)."""
    wanted = {step.span_id for step in steps if step.from_span}
    spans = {hex_id: span for span, _ in trace.spans() if (hex_id := span.span_id.hex()) in wanted}
    for step, described in zip(steps, record["steps"]):
        span = spans.get(step.span_id) if step.from_span else None
        if span is not None and (scores := _scores(span)):
            described["scores"] = scores


def _add_blames(record: dict[str, Any], trace: Trace, steps: Sequence[Step]) -> None:
    """failure_localization's result and blamed spans, when the trace carries them: each
    blame under the step it belongs to (`step`, numbered as printed; None for none)."""
    localization = localization_of(trace)
    blamed = blamed_in(trace, localization)
    if localization is None and not blamed:
        return
    step_of = _step_of_span(trace, steps)
    record["failure_localization"] = localization.as_json() if localization is not None else None
    record["blamed"] = []
    for step in record["steps"]:
        step["blamed"] = []
    for blame in blamed:
        index = step_of(blame.span_id)
        entry = _blame(blame, index is not None and steps[index].span_id == blame.span_id)
        record["blamed"].append({**entry, "step": None if index is None else index + 1})
        if index is not None:
            record["steps"][index]["blamed"].append(entry)


def _blame(blame: Blamed, step_span: bool) -> dict[str, Any]:
    entry = blame.as_json()
    del entry["trace_id"]  # the record's own
    entry["step_span"] = step_span  # the step's own span, not one below it
    return entry


def _step_of_span(trace: Trace, steps: Sequence[Step]):
    """span id -> the index of the step whose span it is or lies under, or None."""
    parents = {span.span_id.hex(): span.parent_span_id.hex() for span, _ in trace.spans()}
    own: dict[str, int] = {}
    # A tool call seen only in a model's output shares that model call's span: the model
    # call's step is the span's.
    for index, step in sorted(enumerate(steps), key=lambda pair: not pair[1].from_span):
        own.setdefault(step.span_id, index)

    def step_of(span_id: str) -> int | None:
        seen = set()
        while span_id and span_id not in seen:
            if span_id in own:
                return own[span_id]
            seen.add(span_id)
            span_id = parents.get(span_id, "")
        return None

    return step_of


def _scores(anchor) -> dict[str, dict[str, Any]]:
    """Results already on the span (`eval.<metric>.score|label|error`), e.g. in a file the
    `file` exporter wrote after scoring."""
    scores: dict[str, dict[str, Any]] = {}
    if anchor is None:
        return scores
    for kv in anchor.attributes:
        parsed = parse_key(kv.key)
        if parsed is not None and parsed[1] in _SCORE_FIELDS:
            scores.setdefault(parsed[0], {})[parsed[1]] = any_value_to_python(kv.value)
    return scores


# The human format ------------------------------------------------------------------------


def human_lines(record: dict[str, Any]) -> list[str]:
    """A compact block per trace; long texts are shortened, their length noted."""
    where = "root" if record["complete"] else "first"
    # Names and ids are the client's text: escaped and bounded, as the debug exporter prints them.
    header = f"trace {record['trace_id']} {where}={excerpt(repr(record['root']))} spans={record['spans']}"
    if record["service"] is not None:
        header += f" service={excerpt(record['service'])}"
    if not record["complete"]:
        header += " (incomplete: no root span)"
    lines = [header]
    if record["kind"] == "session_carrier":
        lines.append(
            f"  spanscore session carrier, not an agent trace: session {excerpt(str(record['session_id']))}, "
            f"{counted(len(record['linked_traces']), 'linked trace')}"
        )
    else:
        conventions = ", ".join(record["conventions"]) or "none"
        scored = "yes" if record["scored"] else f"no, {record['not_scored_because']}"
        lines.append(f"  conventions: {conventions}; scored: {scored}")
        if record["recognized"] or record["steps"]:
            session, agent = (excerpt(record[key]) if record[key] else "(none)" for key in ("session_id", "agent_name"))
            lines.append(f"  session: {session}  agent: {agent}")
            lines.append(f"  user input:   {_text(record['user_input'])}")
            lines.append(f"  final output: {_text(record['final_output'])}")
            lines.append(f"  steps: {len(record['steps'])}")
            for i, step in enumerate(record["steps"], start=1):
                lines.append(f"    {i}. {_step_line(step)}")
                if step["kind"] == "retrieval":
                    lines.extend(f"       {line}" for line in _document_lines(step))
                if step.get("scores"):
                    lines.append(f"       scores on the span: {_scores_text(step['scores'])}")
                lines.extend(f"       {_blame_line(blame, True)}" for blame in step.get("blamed", ()))
        elif record["session_id"]:
            lines.append(f"  session: {excerpt(record['session_id'])}")
        lines.extend(f"  {_blame_line(blame, False)}" for blame in record.get("blamed", ()) if blame["step"] is None)
        if record.get("failure_localization"):
            lines.append(f"  {_localization_line(record['failure_localization'])}")
    if record["scores"]:
        lines.append(f"  scores on the span: {_scores_text(record['scores'])}")
    return lines


def _scores_text(scores: dict[str, dict[str, Any]]) -> str:
    return ", ".join(_score_text(name, score) for name, score in scores.items())


def _step_line(step: dict[str, Any]) -> str:
    parts = [f"{step['kind']} {excerpt(str(step['name']))}"]
    for key in ("arguments", "result", "query", "error"):
        if step.get(key) not in (None, "", {}, []):
            parts.append(f"{key}={_value(step[key])}")
    if step["kind"] == "retrieval":
        parts.append(counted(step["document_count"], "document"))
    return "  ".join(parts)


def _document_lines(step: dict[str, Any]) -> list[str]:
    """The first documents of a retrieval step, one line each, then how many are not shown."""
    lines = []
    for number, document in enumerate(step["documents"], start=1):
        parts = [f"[{number}]"]
        if document["id"] is not None:
            parts.append(excerpt(document["id"]))
        if document["score"] is not None:
            parts.append(f"score={document['score']:.2f}")
        text = document["content"]
        cut = text[:SHORT_TEXT] + "…" if document["content_chars"] > SHORT_TEXT else text
        shown = json.dumps(cut, ensure_ascii=False)
        parts.append(
            f"{shown} ({document['content_chars']} chars)" if document["content_chars"] > SHORT_TEXT else shown
        )
        lines.append(" ".join(parts))
    hidden = step["document_count"] - len(step["documents"])
    if hidden > 0:
        lines.append(f"… {counted(hidden, 'more document')}")
    return lines


def _blame_line(blame: dict[str, Any], in_step: bool) -> str:
    """`✗ blamed span ID: rate_limiting (system execution, medium): ...`; the span named
    when it is not the step's own (a request below a tool call, or in no step)."""
    where = f"span {excerpt(blame['span_id'])}"
    if not blame["step_span"]:
        name = f"{excerpt(repr(blame['span_name']))} " if blame["span_name"] else ""
        where = f"span {name}{excerpt(blame['span_id'])}, {'below this step' if in_step else 'in no step'}"
    how = ", ".join(part for part in (group_words(blame["group"]), blame["impact"]) if part)
    explanation = f": {excerpt(blame['explanation'], BLAME_CHARS)}" if blame["explanation"] else ""
    return f"✗ blamed {where}: {excerpt(blame['category'])} ({excerpt(how)}){explanation}"


def _localization_line(result: dict[str, Any]) -> str:
    """failure_localization's result on the root: label, score, error count, explanation."""
    parts = [excerpt(str(result["label"]))]
    if result["score"] is not None:
        parts.append(f"score {result['score']:.2f}")
    if result["errors"] is not None:
        parts.append(counted(result["errors"], "error"))
    explanation = f": {excerpt(result['explanation'], SUMMARY_CHARS)}" if result["explanation"] else ""
    return f"failure_localization: {', '.join(parts)}{explanation}"


def _value(value: Any) -> str:
    """Structured values (or text holding a JSON object or array) as compact JSON, unquoted;
    other text quoted."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, str):
        return _text(value)
    return _shortened(json.dumps(value, ensure_ascii=False, default=str))


def _text(text: str | None) -> str:
    """Quoted, newlines escaped; past SHORT_TEXT characters cut with an ellipsis."""
    if not text:
        return "(none)"
    if len(text) <= SHORT_TEXT:
        return json.dumps(text, ensure_ascii=False)
    return json.dumps(text[:SHORT_TEXT] + "…", ensure_ascii=False) + f" ({len(text)} chars)"


def _shortened(text: str) -> str:
    if len(text) <= SHORT_TEXT:
        return text
    return f"{text[:SHORT_TEXT]}… ({len(text)} chars)"


def _score_text(name: str, score: dict[str, Any]) -> str:
    name = excerpt(name)
    if "error" in score:
        return f"{name} error"
    value = score.get("score")
    label = f" {excerpt(str(score['label']))}" if "label" in score else ""
    return f"{name}={value:.2f}{label}" if isinstance(value, float) else f"{name}={excerpt(str(value))}{label}"
