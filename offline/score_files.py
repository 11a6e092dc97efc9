"""`spanscore score`: recorded traces through the scoring pipeline, offline.

The same pipeline code as the collector scores the traces, without a port: requests go
in through the in-memory receiver, out through a `file` exporter writing OTLP/JSON lines
(`-o`), the format the input had, so a scored file can be inspected, reported on or
replayed into a backend. The config's processors and assembler settings are used; its
receivers, exporters, score-metrics pipeline and extensions are not.

Time is logical: the pipeline's clock advances by `trace_wait / REQUESTS_PER_TRACE_WAIT`
per request read, so a trace is released once no span of it came for that many
requests (a batch exporter's spans of one trace sit close together in a file) and
sessions stay open to the end of input, where every one closes. When `max_buffered_spans`
are held, reading waits for the scoring to catch up, as a client would.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TextIO

from tqdm import tqdm

from spanscore.config.components import build_factories
from spanscore.config.loader import Config, ConfiguredComponent
from spanscore.core.component import NO_EXTENSIONS, Host
from spanscore.core.consumer import ConsumerFull
from spanscore.core.trace import Trace
from spanscore.core.wording import counted, plural
from spanscore.exporters.file import FileExporter, FileExporterConfig
from spanscore.offline.otlp_files import formats_text, read_requests
from spanscore.offline.reading_bounds import shown_problems
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.wiring import Pipeline
from spanscore.processors.judge_metrics.processor import JudgeMetricsConfig
from spanscore.receivers.ingest import InvalidRequest
from spanscore.receivers.memory import MemoryReceiver

REQUESTS_PER_TRACE_WAIT = 1000
GROUND_TRUTH = "ground_truth"
FAILURE_LOCALIZATION = "failure_localization"  # reads the verdicts of the processors before it
DRAIN_S = 600.0  # generous: judge calls of the traces still held at the end of input
PROGRESS_INTERVAL_S = 0.5


class LogicalClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class MetricTally:
    count: int = 0
    passed: int = 0
    errors: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float | None:
        scored = self.count - self.errors
        return self.total / scored if scored else None


@dataclass
class ScoreSummary:
    requests: int = 0
    spans: int = 0
    traces: int = 0
    problems: list[str] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)  # each input format read, once
    metrics: dict[str, MetricTally] = field(default_factory=lambda: defaultdict(MetricTally))
    unscored_traces: int = 0
    evaluator_calls: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


class ResultTally:
    """A trace exporter that only counts the results of what passes (for the summary)."""

    id = "tally"
    sent_spans = dropped_spans = kept_spans = 0
    dropped_by_reason: Mapping[str, int] = MappingProxyType({})

    def __init__(self, summary: ScoreSummary):
        self.summary = summary

    async def start(self, host: Host = NO_EXTENSIONS) -> None:
        return None

    async def shutdown(self, deadline: float) -> None:
        return None

    def enqueue(self, trace: Trace) -> None:
        self.summary.traces += 1
        for result in trace.results:
            tally = self.summary.metrics[result.name]
            tally.count += 1
            if result.score is None:
                tally.errors += 1
            else:
                tally.total += result.score
                tally.passed += bool(result.passed)
        trace.export_done()


async def score_files(
    paths: Sequence[Path], config: Config, output: Path, progress: TextIO | None = None
) -> ScoreSummary:
    """Score every trace and session of `paths` into `output`; bad lines are reported, not fatal."""
    summary = ScoreSummary()
    started = time.monotonic()
    clock = LogicalClock()
    step = config.pipeline_settings.trace_wait / REQUESTS_PER_TRACE_WAIT
    processors = [(c.id, c.factory.build(c.id, c.config)) for c in config.processors]
    writer = FileExporter("file/score", FileExporterConfig(path=str(output), append=False))
    pipeline = Pipeline(
        Assembler(config.pipeline_settings),
        processors,
        [writer, ResultTally(summary)],
        clock=clock,
        span_events=config.service.pipelines.traces.span_events,
    )
    receiver = MemoryReceiver(pipeline.intake, "score")
    components = [processor for _, processor in processors] + [writer]
    bar = ProgressBar(progress, paths, summary, pipeline)
    try:  # shutdown is safe without start: a failed start still releases what started
        for component in components:
            await component.start()
        await pipeline.start()
        for path in paths:
            for where, request in read_requests(path, summary.problems, bar.at, summary.formats):
                clock.now += step
                summary.requests += 1
                await send_request(receiver, pipeline, clock, request, where, summary)
                bar.show()
            bar.file_done(path)
        deadline = time.monotonic() + DRAIN_S
        bar.scoring()
        following = asyncio.create_task(bar.follow())
        try:
            await pipeline.drain(deadline)
        finally:
            following.cancel()
    finally:
        bar.close()
        deadline = time.monotonic() + DRAIN_S
        for component in reversed(components):
            await component.shutdown(deadline)
    summary.unscored_traces = pipeline.counts.unscored_traces
    summary.evaluator_calls = dict(pipeline.counts.evaluator_calls)
    summary.seconds = time.monotonic() - started
    return summary


class ProgressBar:
    """Bytes of the input files read, out of their size on disk, with the rate and time left;
    after the bar, the traces written, judge calls and problems. Off without a stream."""

    def __init__(self, stream: TextIO | None, paths: Sequence[Path], summary: ScoreSummary, pipeline: Pipeline):
        self.summary, self.pipeline = summary, pipeline
        self.done = 0  # bytes of the files already read in full
        self.shown = 0.0
        self.bar = None
        if stream is not None:
            total = sum(_size(path) for path in paths)
            self.bar = tqdm(total=total, file=stream, unit="B", unit_scale=True, unit_divisor=1024, leave=False)

    def at(self, position: int) -> None:
        """`position` bytes of the current file are read."""
        if self.bar is not None:
            self.bar.n = self.done + position

    def file_done(self, path: Path) -> None:
        self.done += _size(path)
        self.at(0)

    def scoring(self) -> None:
        """Input read: what is left is scoring the traces and sessions still held."""
        if self.bar is not None:
            self.bar.set_description_str("input read; scoring what is held", refresh=False)

    async def follow(self) -> None:
        while True:
            self.show(force=True)
            await asyncio.sleep(PROGRESS_INTERVAL_S)

    def show(self, force: bool = False) -> None:
        if self.bar is None or (not force and time.monotonic() - self.shown < PROGRESS_INTERVAL_S):
            return
        self.shown = time.monotonic()
        calls = sum(self.pipeline.counts.evaluator_calls.values())
        self.bar.set_postfix_str(
            f"{counted(self.summary.traces, 'trace')}, {counted(calls, 'judge call')}, "
            f"{counted(len(self.summary.problems), 'problem')}",
            refresh=False,
        )
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # unreadable: reported by the reader


async def send_request(
    receiver: MemoryReceiver, pipeline: Pipeline, clock: LogicalClock, request, where: str, summary: ScoreSummary
) -> None:
    spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
    waits = (pipeline.assembler.config.trace_wait, pipeline.assembler.config.trace_timeout)
    attempt = 0
    while True:
        try:
            response = receiver.send(request)
            break
        except ConsumerFull:
            # Held spans are at the bound: let the scoring catch up and send again; when
            # nothing held is ready yet, move logical time on until something is.
            if attempt < len(waits):
                clock.now += waits[attempt]
            attempt += 1
            pipeline.tick()
            await pipeline.settle()
            await asyncio.sleep(0.01)  # the exporters finish what they hold on the event loop
        except InvalidRequest as exc:
            summary.problems.append(f"{where}: {exc}")
            return
    rejected = response.partial_success.rejected_spans
    if rejected:
        summary.problems.append(f"{where}: {response.partial_success.error_message}")
    summary.spans += spans - rejected
    pipeline.tick()


def summary_table(summary: ScoreSummary, output: Path) -> str:
    formats = f"{formats_text(summary.formats)}: " if summary.formats else ""
    lines = [
        f"{formats}{counted(summary.spans, 'span')} in {counted(summary.requests, 'request')} -> "
        f"{counted(summary.traces, 'trace')} written to {output} in {summary.seconds:.1f}s "
        f"({summary.spans / max(summary.seconds, 1e-9):,.0f} spans/s); "
        f"{summary.unscored_traces:,} not agent {plural(summary.unscored_traces, 'trace')}, forwarded unscored",
        *result_lines(summary),
    ]
    return "\n".join(lines)


def result_lines(summary: ScoreSummary) -> list[str]:
    """The judge calls, a table of the results per metric, and the problems."""
    lines = []
    if summary.evaluator_calls:
        lines.append(
            "model calls: " + ", ".join(f"{name} {count:,}" for name, count in summary.evaluator_calls.items())
        )
    if summary.metrics:
        lines.append(f"{'metric':<26}{'results':>9}{'mean':>8}{'pass':>8}{'errors':>8}")
        for name, tally in sorted(summary.metrics.items()):
            mean = "-" if tally.mean is None else f"{tally.mean:.3f}"
            scored = tally.count - tally.errors
            rate = "-" if not scored else f"{tally.passed / scored:.0%}"
            lines.append(f"{name:<26}{tally.count:>9,}{mean:>8}{rate:>8}{tally.errors:>8,}")
    if summary.problems:
        lines.append(f"{counted(len(summary.problems), 'problem')} (skipped):")
        lines.extend(f"  {line}" for line in shown_problems(summary.problems))
    return lines


def with_dataset(config: Config, dataset: Path) -> Config:
    """`config` grading against `dataset`: its ground_truth processor pointed at it, or one
    added (last, or before failure_localization), judged by the judge of its judge_metrics
    processor when it has a usable one."""
    factory = next(f for f in build_factories(plugins=False) if f.kind == "processor" and f.type == GROUND_TRUTH)
    processors = list(config.processors)
    existing = [i for i, c in enumerate(processors) if c.type == GROUND_TRUTH]
    if existing:
        component = processors[existing[0]]
        settings = {**component.config.model_dump(exclude_unset=True), "dataset": str(dataset)}
        processors[existing[0]] = ConfiguredComponent(
            component.id, GROUND_TRUTH, factory.config_model.model_validate(settings), factory
        )
    else:
        judge = next(
            (c.config.judge for c in processors if isinstance(c.config, JudgeMetricsConfig) and c.config.configured),
            None,
        )
        settings: dict[str, object] = {"dataset": str(dataset)}
        if judge is not None:
            settings["judge"] = judge.model_dump()
        # Before failure_localization, which reads the verdicts of the processors before it.
        before = next((c for c in processors if c.type == FAILURE_LOCALIZATION), None)
        at = processors.index(before) if before is not None else len(processors)
        processors.insert(
            at, ConfiguredComponent(GROUND_TRUTH, GROUND_TRUTH, factory.config_model.model_validate(settings), factory)
        )
        ids = list(config.processor_ids)
        ids.insert(ids.index(before.id) if before is not None else len(ids), GROUND_TRUTH)
        return replace(config, processors=processors, processor_ids=tuple(ids))
    return replace(config, processors=processors)


def progress_stream(quiet: bool) -> TextIO | None:
    return sys.stderr if not quiet and sys.stderr.isatty() else None
