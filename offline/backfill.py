"""`spanscore score --phoenix URL --project NAME`: a Phoenix project's traces scored again.

The traces come from Phoenix a page at a time (`phoenix_spans`), each as one request, into
the same pipeline `spanscore score` runs on files: the config's assembler settings and
processors, logical time. After a page is sent, logical time moves to each deadline the
assembler names until it holds nothing, so every trace of the page is released, scored
and handed to the sinks before the next page is pulled; memory holds one page (and the
open sessions' summaries), whatever the project's size.

Sinks, any of them:

- `--write-back`: the `phoenix` exporter, pointed at the Phoenix the spans came from,
  writes each result as an annotation on its span (a session's on the session), with the
  identifier `spanscore`: Phoenix keeps one annotation per span, name and identifier, so
  scoring again replaces the annotation, and the metric's revision is in its metadata;
- `-o FILE`: the `file` exporter's OTLP/JSON lines, as `spanscore score` writes;
- `--exporters`: the config's own exporters (and the extensions they use), as
  `spanscore run` would send to them.

Progress is kept in a state file (`--state`), written, atomically, once every sink is done
with a page: Phoenix's cursor of the next page, and the output file's length. A run that
finds a state file of the same pull (URL, project, window, output) goes on from its
cursor, the output cut back to that length, so an interrupted pull, whatever stopped it,
is neither scored twice in the file nor missed; the pages it had not finished are scored
again, and their annotations replaced. A state file of another pull is an error, not
overwritten. The state file is removed when the pull ends. Sessions close at the end of
the run: a resumed pull scores a session from the traces that run pulls.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from spanscore.config.loader import Config
from spanscore.core.component import Host
from spanscore.core.trace_exporter import TraceExporter
from spanscore.core.wording import counted
from spanscore.exporters.file import FileExporter, FileExporterConfig
from spanscore.exporters.phoenix import PhoenixExporter, PhoenixExporterConfig
from spanscore.offline.phoenix_spans import PhoenixTraces
from spanscore.offline.score_files import DRAIN_S, LogicalClock, ResultTally, ScoreSummary, result_lines, send_request
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.wiring import Pipeline
from spanscore.receivers.memory import MemoryReceiver

STATE_VERSION = 1
DEFAULT_STATE = "spanscore-pull.json"
EXPORT_WAIT_S = 600.0  # for the sinks to be done with one page: an exporter's retries end well before
PLAIN_PROGRESS_S = 5.0  # between progress lines when stderr is not a terminal


class BackfillError(Exception):
    """The pull cannot start or go on (a state file of another pull, a sink that gave up);
    the message is one line."""


@dataclass(frozen=True)
class Sinks:
    output: Path | None = None
    write_back: bool = False
    exporters: bool = False  # the config's own


@dataclass
class PullState:
    """What a resumed pull needs: which pull it is, and how far it got."""

    pull: dict[str, str | None]
    cursor: str | None = None
    output_bytes: int = 0
    pages: int = 0
    traces: int = 0
    spans: int = 0
    version: int = STATE_VERSION

    @classmethod
    def load(cls, path: Path, pull: dict[str, str | None]) -> PullState | None:
        """The state of this pull at `path`; None when there is none; BackfillError for
        another pull's or an unreadable one."""
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackfillError(f"cannot read the state file {path}: {exc}") from None
        if not isinstance(document, dict) or document.get("version") != STATE_VERSION:
            raise BackfillError(f"{path} is not a spanscore pull's state file: remove it or give another --state")
        if document.get("pull") != pull:
            raise BackfillError(
                f"{path} is the state of another pull ({_pull_text(document.get('pull'))}): "
                "remove it to start this one, or give another --state"
            )
        return cls(**{key: document[key] for key in asdict(cls(pull)) if key in document})

    def save(self, path: Path) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(asdict(self), indent=1) + "\n", encoding="utf-8")
        os.replace(partial, path)  # a crash leaves the old state or the new one, never half of one


def _pull_text(pull: object) -> str:
    if not isinstance(pull, dict):
        return "unreadable"
    return ", ".join(f"{key} {value}" for key, value in pull.items() if value is not None)


def pull_of(traces: PhoenixTraces, since: datetime | None, until: datetime | None, sinks: Sinks) -> dict:
    return {
        "phoenix": traces.where,
        "project": traces.project,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "output": str(sinks.output.resolve()) if sinks.output else None,
    }


@dataclass
class BackfillSummary:
    scores: ScoreSummary
    pages: int = 0
    resumed_from: int = 0  # traces a previous run had done
    dropped_spans: int = 0  # given up on by a sink


async def backfill(
    traces: PhoenixTraces,
    pull: dict,
    config: Config,
    sinks: Sinks,
    state_path: Path,
    api_key: str | None,
    progress: TextIO | None = None,
) -> BackfillSummary:
    """Score every trace `traces` gives into `sinks`, keeping progress in `state_path`."""
    state = PullState.load(state_path, pull) or PullState(pull)
    summary = BackfillSummary(ScoreSummary(), pages=state.pages, resumed_from=state.traces)
    scores = summary.scores
    started = time.monotonic()
    clock = LogicalClock()
    processors = [(c.id, c.factory.build(c.id, c.config)) for c in config.processors]
    extensions = [c.factory.build(c.id, c.config) for c in config.extensions] if sinks.exporters else []
    host = Host(dict(zip((c.id for c in config.extensions), extensions)))
    exporters: list[TraceExporter] = []
    if sinks.output is not None:
        _cut_back(sinks.output, state.output_bytes)
        exporters.append(FileExporter("file/score", FileExporterConfig(path=str(sinks.output), append=True)))
    if sinks.write_back:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        exporters.append(
            PhoenixExporter("phoenix/write-back", PhoenixExporterConfig(endpoint=traces.client.base, headers=headers))
        )
    if sinks.exporters:
        exporters.extend(c.factory.build(c.id, c.config) for c in config.exporters)
    # A page holds whole traces: no span of a trace comes later, so no copy is kept to
    # score it again (about 800 bytes a span until the run ends, on logical time).
    settings = config.pipeline_settings.model_copy(update={"late_spans": "forward"})
    pipeline = Pipeline(
        Assembler(settings),
        processors,
        [*exporters, ResultTally(scores)],
        clock=clock,
        span_events=config.service.pipelines.traces.span_events,
    )
    receiver = MemoryReceiver(pipeline.intake, "score")
    components = [*extensions, *(p for _, p in processors), *exporters]
    shown = Progress(progress, state)
    try:  # shutdown is safe without start: a failed start still releases what started
        for component in components:
            await component.start(host)
        await pipeline.start()
        for page in traces.pages(state.cursor):
            for trace_id, request in page.requests:
                scores.requests += 1
                await send_request(receiver, pipeline, clock, request, f"trace {trace_id}", scores)
            await _page_done(pipeline, clock)
            summary.dropped_spans = sum(e.dropped_spans for e in exporters)
            if summary.dropped_spans:  # a sink gave up: going on would lose more of it
                raise BackfillError(
                    f"a sink gave up on {counted(summary.dropped_spans, 'span')}; "
                    f"its error is above; run again to go on from page {state.pages + 1}"
                )
            state.cursor = page.next_cursor
            state.pages += 1
            state.traces += len(page.requests)
            state.spans += page.spans
            state.output_bytes = sinks.output.stat().st_size if sinks.output is not None else 0
            state.save(state_path)
            summary.pages = state.pages
            shown.page(state, sum(pipeline.counts.evaluator_calls.values()))
        await pipeline.drain(time.monotonic() + DRAIN_S)  # sessions close: their carriers go out
    finally:
        shown.close()
        deadline = time.monotonic() + DRAIN_S
        for component in reversed(components):
            await component.shutdown(deadline)
    summary.dropped_spans = sum(e.dropped_spans for e in exporters)
    if summary.dropped_spans:
        gave_up = counted(summary.dropped_spans, "span")
        raise BackfillError(f"a sink gave up on {gave_up} at the end; its error is above")
    state_path.unlink(missing_ok=True)
    scores.unscored_traces = pipeline.counts.unscored_traces
    scores.evaluator_calls = dict(pipeline.counts.evaluator_calls)
    scores.seconds = time.monotonic() - started
    return summary


async def _page_done(pipeline: Pipeline, clock: LogicalClock) -> None:
    """Every trace sent so far released, scored and done with by every sink."""
    assembler = pipeline.assembler
    while len(assembler):
        deadline = assembler.next_deadline()
        if deadline is not None:
            clock.now = max(clock.now, deadline)
        pipeline.tick()
        await pipeline.settle()
    pipeline.tick()
    await pipeline.settle()
    waited = time.monotonic() + EXPORT_WAIT_S
    while pipeline.counts.held_spans > 0:  # the exporters batch and send on the event loop
        if time.monotonic() > waited:
            raise BackfillError(f"the sinks still hold {counted(pipeline.counts.held_spans, 'span')} after a page")
        await asyncio.sleep(0.005)


def _cut_back(output: Path, length: int) -> None:
    """The output as a previous run of this pull left it after its last page done: new, or
    cut back to `length`, so lines of a page it had not finished are not written twice."""
    if length == 0:
        output.write_bytes(b"")
        return
    with output.open("r+b") as file:
        file.truncate(length)


class Progress:
    """Pages, traces and spans pulled and scored, judge calls: a bar on a terminal, a line
    every few seconds otherwise. Off without a stream."""

    def __init__(self, stream: TextIO | None, state: PullState):
        self.stream = stream
        self.started = time.monotonic()
        self.spans_before = state.spans
        self.shown = 0.0
        self.bar = None
        if stream is not None and stream.isatty():
            self.bar = tqdm(file=stream, unit=" traces", initial=state.traces, leave=False)

    def page(self, state: PullState, judge_calls: int) -> None:
        if self.stream is None:
            return
        rate = (state.spans - self.spans_before) / max(time.monotonic() - self.started, 1e-9)
        text = (
            f"{counted(state.pages, 'page')}, {counted(state.spans, 'span')} "
            f"({rate:,.0f} spans/s), {counted(judge_calls, 'judge call')}"
        )
        if self.bar is not None:
            self.bar.n = state.traces
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.refresh()
        elif time.monotonic() - self.shown >= PLAIN_PROGRESS_S:
            self.shown = time.monotonic()
            print(f"spanscore score: {counted(state.traces, 'trace')} scored, {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def summary_text(summary: BackfillSummary, traces: PhoenixTraces, sinks: Sinks) -> str:
    scores = summary.scores
    went = [
        where
        for where, on in (
            (str(sinks.output), sinks.output is not None),
            (f"annotations in Phoenix at {traces.where}", sinks.write_back),
            ("the config's exporters", sinks.exporters),
        )
        if on
    ]
    resumed = f" (resumed after {counted(summary.resumed_from, 'trace')})" if summary.resumed_from else ""
    lines = [
        f"phoenix project '{traces.project}': {counted(scores.spans, 'span')} of {counted(scores.requests, 'trace')} "
        f"pulled in {counted(summary.pages, 'page')}{resumed} -> {counted(scores.traces, 'trace')} written to "
        f"{' and '.join(went)} in {scores.seconds:.1f}s ({scores.spans / max(scores.seconds, 1e-9):,.0f} spans/s); "
        f"{scores.unscored_traces:,} not agent traces, forwarded unscored",
        *result_lines(scores),
    ]
    return "\n".join(lines)


def stderr_progress(quiet: bool) -> TextIO | None:
    return None if quiet else sys.stderr
