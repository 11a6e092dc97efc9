"""Late re-scores across a restart with file_storage: the copy of a scored, exported trace
is taken back from disk, so a late span after the restart re-scores the trace with every
span it had and the next sequence; the original requests leave the write-ahead log."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from spanscore.core.session import Session
from spanscore.exporters.memory import MemoryExporter
from spanscore.extensions.rescore_copies import FILE_NAME, RescoreCopies
from spanscore.extensions.write_ahead_log import WriteAheadLog
from spanscore.pipeline.assembler import Assembler
from spanscore.pipeline.log_retention import LogRetention
from spanscore.pipeline.settings import PipelineSettings
from spanscore.pipeline.wiring import Pipeline
from spanscore.receivers.memory import MemoryReceiver
from tests.support.pipeline_rig import Clock
from tests.support.spans import new_span_id, new_trace_id, request_of, span
from tests.support.toy_metric import ToyMetric, toy

EVERY_TRACE = {"agent_traces_only": False}


@dataclass
class Run:
    """One process's life on the storage directory."""

    pipeline: Pipeline
    receiver: MemoryReceiver
    exporter: MemoryExporter
    metric: ToyMetric
    log: WriteAheadLog
    clock: Clock

    async def at(self, now: float) -> None:
        self.clock.now = now
        self.pipeline.tick()
        await self.pipeline.settle()

    async def stop(self) -> None:
        await self.pipeline.drain(time.monotonic() + 5.0)
        self.log.close()

    def carriers(self, trace_id: bytes) -> list[dict]:
        return [e.anchor_attributes for e in self.exporter.by_trace_id(trace_id) if e.span_names == ["evaluate_trace"]]


async def start(directory: Path, wall_now: float | None = None, **settings) -> Run:
    """Opens the log and the copies as file_storage does, replays, restores."""
    log = WriteAheadLog(directory, copies=RescoreCopies(directory))
    replay = log.open()
    assert log.copies is not None
    kept = log.copies.open(wall_now)
    config = PipelineSettings(
        **{"trace_wait": 1.0, "trace_timeout": 30.0, "late_window": 600.0, "score": EVERY_TRACE, **settings}
    )
    metric, exporter, clock = toy(), MemoryExporter(), Clock()
    pipeline = Pipeline(Assembler(config), [("processor/0", metric)], [exporter], clock=clock, write_ahead=log)
    await pipeline.start()
    pipeline.intake.replay(replay)
    pipeline.restore_late(kept)
    return Run(pipeline, MemoryReceiver(pipeline.intake), exporter, metric, log, clock)


async def scored_trace(run: Run, spans: int = 1) -> tuple[bytes, bytes]:
    trace_id, root_id = new_trace_id(), new_span_id()
    children = [span(trace_id, f"step {n}", parent=root_id) for n in range(spans - 1)]
    run.receiver.send(request_of([span(trace_id, "root", span_id=root_id), *children]))
    await run.at(run.clock.now + 2.0)
    return trace_id, root_id


async def test_a_late_span_after_a_restart_rescores_with_every_span_the_trace_had(tmp_path):
    run = await start(tmp_path)
    trace_id, root_id = await scored_trace(run, spans=2)
    assert run.exporter.only(trace_id).scores == {"toy": 0.5}
    assert run.log.pending_requests == 0  # exported: its request is done with, its copy is kept
    await run.stop()

    run = await start(tmp_path)
    await run.at(5.0)
    assert run.metric.seen == [] and run.exporter.exported == []  # neither scored again nor sent at start
    run.receiver.send(request_of([span(trace_id, "late tool", parent=root_id)]))
    await run.at(7.0)
    late, carrier = run.exporter.by_trace_id(trace_id)
    assert late.late and late.span_names == ["late tool"]
    assert carrier.span_names == ["evaluate_trace"] and carrier.scores == {"toy": 0.75}  # 3 spans of 4
    assert carrier.anchor_attributes["eval.toy.explanation"] == "3 spans"
    assert carrier.anchor_attributes["eval.toy.sequence"] == 2
    assert carrier.spans[0].parent_span_id == root_id
    await run.stop()
    # The requests are all done with: only the segment being written is left, and it holds nothing pending.
    assert len(list(tmp_path.glob("*.wal"))) == 1 and WriteAheadLog(tmp_path).open() == []


async def test_a_trace_rescored_before_the_restart_is_rescored_with_the_sequence_after(tmp_path):
    run = await start(tmp_path, max_rescores=2)
    trace_id, root_id = await scored_trace(run)
    run.receiver.send(request_of([span(trace_id, "late 1", parent=root_id)]))
    await run.at(5.0)
    assert [c["eval.toy.sequence"] for c in run.carriers(trace_id)] == [2]
    await run.stop()

    run = await start(tmp_path, max_rescores=2)
    run.receiver.send(request_of([span(trace_id, "late 2", parent=root_id)]))
    await run.at(2.0)
    [carrier] = run.carriers(trace_id)
    assert (carrier["eval.toy.sequence"], carrier["eval.toy.explanation"]) == (3, "3 spans")
    await run.stop()

    run = await start(tmp_path, max_rescores=2)  # reached: the copy was dropped on disk too
    assert len(run.pipeline.late or []) == 0
    run.receiver.send(request_of([span(trace_id, "late 3", parent=root_id)]))
    await run.at(2.0)
    assert run.carriers(trace_id) == [] and run.metric.seen == []
    await run.stop()


async def test_a_copy_past_its_window_at_the_restart_is_not_taken_back(tmp_path):
    run = await start(tmp_path, late_window=60.0)
    trace_id, root_id = await scored_trace(run)
    await run.stop()

    run = await start(tmp_path, wall_now=time.time() + 61.0, late_window=60.0)
    assert (tmp_path / FILE_NAME).stat().st_size == 0  # dropped on disk too
    run.receiver.send(request_of([span(trace_id, "too late", parent=root_id)]))
    await run.at(40.0)  # its parent is not there: released at trace_timeout
    # Not known as released either: the span is a trace of its own, scored as one.
    [alone] = run.exporter.by_trace_id(trace_id)
    assert not alone.late and alone.span_names == ["too late"] and alone.scores == {"toy": 0.25}
    assert run.carriers(trace_id) == []
    await run.stop()


async def test_a_copy_that_expires_after_the_restart_is_forgotten_by_the_restored_window(tmp_path):
    run = await start(tmp_path, late_window=60.0)
    trace_id, root_id = await scored_trace(run)
    await run.stop()

    run = await start(tmp_path, late_window=60.0)
    assert len(run.pipeline.late or []) == 1
    run.clock.now = 61.0  # the window, counted from the first run's release, ended meanwhile
    run.receiver.send(request_of([span(trace_id, "too late", parent=root_id)]))
    await run.at(63.0)
    assert run.metric.seen == [] and run.carriers(trace_id) == []
    await run.stop()


async def test_the_memory_bound_applies_to_what_a_restart_takes_back_and_on_disk(tmp_path):
    run = await start(tmp_path, late_memory_spans=10)
    first, _ = await scored_trace(run, spans=2)
    second, second_root = await scored_trace(run, spans=2)
    await run.stop()

    run = await start(tmp_path, late_memory_spans=3)  # lowered: the trace scored first is forgotten
    assert run.pipeline.late is not None and run.pipeline.late.span_count == 2
    await run.stop()
    copies = RescoreCopies(tmp_path)
    assert [copy.trace_id for copy in copies.open()] == [second]
    copies.close()

    run = await start(tmp_path, late_memory_spans=3)
    run.receiver.send(request_of([span(second, "late", parent=second_root)]))
    await run.at(2.0)
    assert [c["eval.toy.sequence"] for c in run.carriers(second)] == [2]
    await run.stop()


async def test_the_log_size_gauge_counts_the_copies(tmp_path):
    run = await start(tmp_path)
    await scored_trace(run, spans=3)
    segments = sum(path.stat().st_size for path in tmp_path.glob("*.wal"))
    copies = (tmp_path / FILE_NAME).stat().st_size
    assert copies > 0 and run.log.bytes_on_disk == segments + copies
    await run.stop()


async def test_with_late_spans_forwarded_a_restart_drops_the_copies_on_disk(tmp_path):
    run = await start(tmp_path)
    await scored_trace(run)
    await run.stop()
    run = await start(tmp_path, late_spans="forward")
    await run.stop()
    assert (tmp_path / FILE_NAME).stat().st_size == 0


def test_late_spans_exported_before_their_trace_leave_its_session_marks_alone(tmp_path):
    # Late spans and a re-score's carrier have the scored trace's id: exported first (its
    # export retried, theirs not), they must not take the trace's session from the log's book.
    log = WriteAheadLog(tmp_path)
    log.open()
    assembler = Assembler(PipelineSettings(trace_wait=1.0))
    trace_id, root_id = new_trace_id(), new_span_id()
    first = request_of([span(trace_id, "root", span_id=root_id)])
    first_record = log.append(first.SerializeToString(), 1)
    assembler.add(first, 0.0, first_record)
    [trace] = assembler.pop_all()
    later = request_of([span(trace_id, "late", parent=root_id)])
    assembler.add(later, 5.0, log.append(later.SerializeToString(), 1))
    [late] = assembler.pop_all()
    assert late.late
    book = LogRetention(log)
    session = Session("chat-1", next(iter(trace.spans_by_origin)).resource, 0.0)
    book.scored_in(trace, session)
    book.exported(late, {"chat-1": session})
    book.exported(trace, {"chat-1": session})
    log.close()
    # The trace is kept to rebuild its open session (scored again, not sent); the late span is done with.
    [replayed] = WriteAheadLog(tmp_path).open()
    assert (replayed.sequence, replayed.rescore_traces, replayed.exported_traces) == (first_record, {trace_id}, set())


async def test_a_trace_killed_while_being_scored_is_replayed_once_and_keeps_its_copy(tmp_path):
    # Its copy is written at its release, before scoring; its request is not done with
    # until it is exported: the replay scores and sends it, the copy is not doubled.
    trace_id, root_id = new_trace_id(), new_span_id()
    request = request_of([span(trace_id, "root", span_id=root_id)])
    log = WriteAheadLog(tmp_path, copies=RescoreCopies(tmp_path))
    log.open()
    assert log.copies is not None
    log.copies.open()
    log.append(request.SerializeToString(), 1)
    log.copies.keep(trace_id, time.time() + 600, 1, request.SerializeToString())
    log.close()  # killed: nothing exported

    run = await start(tmp_path)
    await run.at(2.0)
    assert run.exporter.only(trace_id).scores == {"toy": 0.25}
    run.receiver.send(request_of([span(trace_id, "late", parent=root_id)]))
    await run.at(4.0)
    [carrier] = run.carriers(trace_id)
    assert (carrier["eval.toy.sequence"], carrier["eval.toy.explanation"]) == (2, "2 spans")
    await run.stop()


async def test_traces_forgotten_for_the_bound_are_logged_once_not_per_trace(tmp_path, caplog):
    run = await start(tmp_path, late_memory_spans=3)
    with caplog.at_level(logging.WARNING, logger="spanscore.pipeline"):
        for _ in range(6):  # each kept trace of 2 spans forgets the one before
            await scored_trace(run, spans=2)
    said = [r.getMessage() for r in caplog.records if "late_memory_spans" in r.getMessage()]
    assert len(said) == 1 and "the oldest kept" in said[0], said  # the rest summed once a minute
    assert run.pipeline.late is not None and run.pipeline.late.forgotten.total == 5
    await run.stop()
