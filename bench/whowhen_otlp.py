"""Who&When runs as OTLP/JSON: one ExportTraceServiceRequest per run, one run per line.

    python bench/whowhen_otlp.py ARCHIVE.tar.gz -o OUT.jsonl[.gz]

Who&When (Zhang et al., ICML 2025; MIT) ships its multi-agent runs as JSON files
(`question`, `ground_truth`, `history[]` of {content, role, name}, and the labelled
`mistake_agent` / `mistake_step`); this turns each into the spans an instrumented run
would have sent, in the OpenTelemetry GenAI conventions, so spanscore reads it as any
other agent trace:

- a root span `invoke_agent <system>` (`gen_ai.operation.name` = invoke_agent; the
  system is Magentic-One for the Hand-Crafted runs, CaptainAgent for the
  Algorithm-Generated ones), the question as its input message and the last step's
  content as its output message, `session.id` and `gen_ai.conversation.id` = the run id;
- one child `chat` span per history step, in order, named for the agent that spoke
  (`name`, else `role`: the Hand-Crafted runs have only roles, such as "Orchestrator
  (-> WebSurfer)"), with `gen_ai.agent.name` the same and the step's content as its
  output message. spanscore's normalizer makes each one LLM step, in history order.

Ids are derived from the run id (sha256), so `step_span_id(run_id, i)` is the span of
`history[i]`: the labelled `mistake_step` maps to a span id without any extra attribute.
Timestamps start at a fixed instant, one second per step. Labels (`mistake_*`,
`ground_truth`) are not put on the spans.

The archive is read directly (tarfile), every `*.json` member a run; a run's id is its
folder and file stem, e.g. `Hand-Crafted/24`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

BASE_TIME_NANOS = 1_700_000_000 * 10**9  # 2023-11-14T22:13:20Z: every run starts here
STEP_NANOS = 10**9
SCOPE = {"name": "spanscore.bench.whowhen_otlp"}
SYSTEMS = {"Hand-Crafted": "Magentic-One", "Algorithm-Generated": "CaptainAgent"}
DEFAULT_SYSTEM = "multi-agent"
_INTERNAL = 1  # SpanKind INTERNAL


class RunError(ValueError):
    """A run that cannot be converted (no history, a step without content...)."""


def _hex(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def trace_id(run_id: str) -> str:
    return _hex(f"whowhen/{run_id}/trace", 32)


def root_span_id(run_id: str) -> str:
    return _hex(f"whowhen/{run_id}/run", 16)


def step_span_id(run_id: str, index: int) -> str:
    """The span id of `history[index]` of run `run_id`."""
    return _hex(f"whowhen/{run_id}/step/{index}", 16)


def system_of(run_id: str) -> str:
    """The multi-agent system that recorded the run, from its folder."""
    return SYSTEMS.get(PurePosixPath(run_id).parts[0], DEFAULT_SYSTEM) if run_id else DEFAULT_SYSTEM


def _attribute(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def _messages(role: str, text: str, name: str | None = None, finish_reason: str | None = None) -> str:
    """One message in the GenAI conventions' format (a JSON array of {role, parts, ...})."""
    message: dict[str, Any] = {"role": role, "parts": [{"type": "text", "content": text}]}
    if name is not None:
        message["name"] = name
    if finish_reason is not None:
        message["finish_reason"] = finish_reason
    return json.dumps([message], ensure_ascii=False)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _speaker(step: dict[str, Any], index: int) -> str:
    for key in ("name", "role"):
        value = step.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise RunError(f"history[{index}] has neither a `name` nor a `role`")


def convert_run(run: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The OTLP/JSON export request (hex ids) of one Who&When run."""
    history = run.get("history") if isinstance(run, dict) else None
    if not isinstance(history, list) or not history:
        raise RunError("no `history` list of steps")
    for index, step in enumerate(history):
        if not isinstance(step, dict) or "content" not in step:
            raise RunError(f"history[{index}] is not a step with `content`")
    system = system_of(run_id)
    trace = trace_id(run_id)
    root = root_span_id(run_id)
    question = _text(run.get("question", ""))
    last = _text(history[-1]["content"])
    spans = [
        {
            "traceId": trace,
            "spanId": root,
            "name": f"invoke_agent {system}",
            "kind": _INTERNAL,
            "startTimeUnixNano": str(BASE_TIME_NANOS),
            "endTimeUnixNano": str(BASE_TIME_NANOS + len(history) * STEP_NANOS),
            "attributes": [
                _attribute("gen_ai.operation.name", "invoke_agent"),
                _attribute("gen_ai.agent.name", system),
                _attribute("session.id", run_id),
                _attribute("gen_ai.conversation.id", run_id),
                _attribute("gen_ai.input.messages", _messages("user", question)),
                _attribute("gen_ai.output.messages", _messages("assistant", last, finish_reason="stop")),
            ],
        }
    ]
    for index, step in enumerate(history):
        speaker = _speaker(step, index)
        start = BASE_TIME_NANOS + index * STEP_NANOS
        spans.append(
            {
                "traceId": trace,
                "spanId": step_span_id(run_id, index),
                "parentSpanId": root,
                "name": speaker,
                "kind": _INTERNAL,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + STEP_NANOS),
                "attributes": [
                    _attribute("gen_ai.operation.name", "chat"),
                    _attribute("gen_ai.agent.name", speaker),
                    _attribute("session.id", run_id),
                    _attribute(
                        "gen_ai.output.messages",
                        _messages("assistant", _text(step["content"]), name=speaker, finish_reason="stop"),
                    ),
                ],
            }
        )
    resource = {"attributes": [_attribute("service.name", f"who-and-when/{system}")]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": SCOPE, "spans": spans}]}]}


def run_id_of(member_name: str) -> str:
    """`Who&When/Hand-Crafted/24.json` -> `Hand-Crafted/24`."""
    path = PurePosixPath(member_name)
    return str(PurePosixPath(*path.parent.parts[-1:], path.stem))


def read_runs(archive: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(member name, run id, run) for every `*.json` member of the archive, by name."""
    with tarfile.open(archive, "r:*") as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")), key=_natural)
        for member in members:
            data = tar.extractfile(member)
            if data is None:
                continue
            try:
                run = json.loads(data.read())
            except ValueError as exc:
                raise RunError(f"{member.name}: not JSON: {exc}") from None
            yield member.name, run_id_of(member.name), run


def _natural(member: tarfile.TarInfo) -> tuple[str, int, str]:
    """Folder, then file number (2.json before 10.json)."""
    path = PurePosixPath(member.name)
    return (str(path.parent), int(path.stem) if path.stem.isdigit() else -1, path.stem)


def convert_archive(archive: Path) -> list[str]:
    """One OTLP/JSON line per run of the archive."""
    lines = []
    for name, run_id, run in read_runs(archive):
        try:
            request = convert_run(run, run_id)
        except RunError as exc:
            raise RunError(f"{name}: {exc}") from None
        lines.append(json.dumps(request, ensure_ascii=False, separators=(",", ":")))
    if not lines:
        raise RunError(f"{archive}: no run (*.json member) in the archive")
    return lines


def write_lines(lines: list[str], out: Path) -> None:
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    if out.suffix == ".gz":
        text = gzip.compress(text, mtime=0)
    out.write_bytes(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Convert Who&When runs (a .tar.gz of run JSON files) to OTLP/JSON lines."
    )
    parser.add_argument("archive", type=Path, help="the Who&When archive (.tar.gz)")
    parser.add_argument(
        "-o", "--output", type=Path, required=True, help="OTLP/JSON lines to write (.jsonl or .jsonl.gz)"
    )
    args = parser.parse_args(argv)
    archive: Path = args.archive
    if not archive.exists():
        return _fail(f"{archive}: no such file")
    if archive.is_dir():
        return _fail(f"{archive}: a directory, not a tar archive")
    try:
        if not tarfile.is_tarfile(archive):
            return _fail(f"{archive}: not a tar archive")
        lines = convert_archive(archive)
    except RunError as exc:
        return _fail(str(exc))
    except (OSError, tarfile.TarError, EOFError) as exc:
        return _fail(f"{archive}: cannot read: {exc}")
    try:
        write_lines(lines, args.output)
    except OSError as exc:
        return _fail(f"{args.output}: cannot write: {exc.strerror or exc}")
    print(f"{len(lines)} runs written to {args.output}", file=sys.stderr)
    return 0


def _fail(message: str) -> int:
    print(f"whowhen_otlp: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
