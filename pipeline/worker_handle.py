"""One scoring worker process as the collector sees it: its pipe, a sender and a reader thread.

Requests get an id and a future; those of one round of the collector's event loop go as
one list, sent by a thread so pickling and the pipe never block the loop, and a thread
reads the worker's lists back, settling the futures on the loop. A request whose future
is cancelled is cancelled in the worker too. A worker that exits fails the futures it
held with `WorkerLost`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Protocol

from spanscore.exporters.score_observations import ScoreObservations
from spanscore.pipeline.worker_messages import (
    STOP,
    Answer,
    AskProgress,
    Cancel,
    CloseSession,
    FromWorker,
    JudgesReport,
    Observed,
    Progress,
    Ready,
    ScoreTraces,
    SentTrace,
    StartFailed,
    Stop,
    ToWorker,
)
from spanscore.processors.judge_metrics.telemetry import JudgeTelemetry

log = logging.getLogger("spanscore.scoring_workers")

MAX_SEND_BATCH = 512  # messages in one pipe send, when rounds queue up faster than they go


class WorkerLost(RuntimeError):
    """The worker process scoring a trace exited before answering."""


class WorkerProcess(Protocol):
    """What the handle needs of the process (a `multiprocessing` process, or a test's)."""

    @property
    def pid(self) -> int | None: ...  # None until started

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def kill(self) -> None: ...


class WorkerHandle:
    """Called on the collector's event loop, except the two threads it starts."""

    def __init__(
        self,
        index: int,
        conn: Connection,
        process: WorkerProcess,
        loop: asyncio.AbstractEventLoop,
        on_lost: Callable[[WorkerHandle], None],
        on_observed: Callable[[ScoreObservations], None],
    ):
        self.index = index
        self._conn = conn
        self._process = process
        if process.pid is None:
            raise ValueError(f"scoring worker {index}'s process was not started")
        self.pid = process.pid
        self._loop = loop
        self._on_lost = on_lost
        self._on_observed = on_observed
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}  # by request id, with its item count
        self._asked: dict[int, asyncio.Future] = {}  # progress asked, by request id
        self._next_id = 0
        self.ready: asyncio.Future = loop.create_future()
        self.lost = False
        self.judge_telemetry: list[JudgeTelemetry] = []  # as the worker last reported them
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()  # lists of messages, one per loop round
        self._batch: list[ToWorker] = []
        threading.Thread(target=self._send_forever, name=f"scoring-{index}-send", daemon=True).start()
        threading.Thread(target=self._receive_forever, name=f"scoring-{index}-receive", daemon=True).start()

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    def score_traces(self, traces: list[SentTrace], left: bool = False) -> tuple[int, asyncio.Future]:
        """The request id, and the future of the list of the traces' `Scored`, in order
        (`left`: the traces left already, the answer is not prepared). Cancelling the
        future cancels the request in the worker."""
        request_id = self._next_id
        future = self._submit(lambda request_id: ScoreTraces(request_id, tuple(traces), left), len(traces))
        future.add_done_callback(lambda done: self._cancel(request_id) if done.cancelled() else None)
        return request_id, future

    def ask_progress(self, request_id: int) -> asyncio.Future:
        """The future of the worker's `Progress` of the request (its traces leave now: the
        answer to come is not prepared); None when the answer came first or the worker exited."""
        future = self._loop.create_future()
        if self.lost or request_id not in self.pending:
            future.set_result(None)
            return future
        self._asked[request_id] = future
        future.add_done_callback(lambda _: self._asked.pop(request_id, None))
        self._send(AskProgress(request_id))
        return future

    def _cancel(self, request_id: int) -> None:
        if self.pending.pop(request_id, None) is not None and not self.lost:
            self._send(Cancel(request_id))

    def close_session(self, session_id: str, links: list[tuple[bytes, bytes | None]]) -> asyncio.Future:
        """The future of the session's `Scored`, its carrier prepared."""
        return self._submit(lambda request_id: CloseSession(request_id, session_id, tuple(links)), 1)

    def _submit(self, message: Callable[[int], ToWorker], items: int) -> asyncio.Future:
        """The future of the worker's answer to `message` (about `items` traces or
        sessions), sent with this loop round's."""
        future = self._loop.create_future()
        if self.lost:
            future.set_exception(WorkerLost(f"scoring worker process exited (code {self._process.exitcode})"))
            return future
        request_id = self._next_id
        self._next_id += 1
        self.pending[request_id] = (future, items)
        self._send(message(request_id))
        return future

    def _send(self, message: ToWorker) -> None:
        """`message` goes with this loop round's."""
        if not self._batch:
            self._loop.call_soon(self._flush)
        self._batch.append(message)

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self._outbox.put(batch)

    def stop(self) -> None:
        self._flush()
        self._outbox.put([STOP])

    async def join(self, deadline: float) -> None:
        process = self._process
        while process.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if process.is_alive():
            log.error("scoring worker %d did not stop by the shutdown deadline; killing it", self.index)
            process.kill()
            await asyncio.to_thread(process.join, 1.0)
        self._conn.close()

    # Threads -------------------------------------------------------------------------

    def _send_forever(self) -> None:
        outbox, conn = self._outbox, self._conn
        while True:
            batch = outbox.get()
            while not outbox.empty() and len(batch) < MAX_SEND_BATCH:
                batch += outbox.get_nowait()
            try:
                conn.send(batch)
            except (OSError, ValueError):  # the worker is gone; the reader reports it
                return
            if isinstance(batch[-1], Stop):
                return

    def _receive_forever(self) -> None:
        while True:
            try:
                batch = self._conn.recv()
            except (EOFError, OSError, ValueError):
                self._process.join(5.0)
                if not self._loop.is_closed():  # else the pipe was closed with the loop: nobody waits
                    self._loop.call_soon_threadsafe(self._lost)
                return
            self._loop.call_soon_threadsafe(self._deliver, batch)

    # Event loop ----------------------------------------------------------------------

    def _deliver(self, batch: list[FromWorker]) -> None:
        for message in batch:
            if isinstance(message, Answer):
                asked = self.pending.pop(message.request_id, None)
                if asked is None:  # answered already, as lost
                    continue
                future, _ = asked
                if not future.done():
                    future.set_result(message.scored)
                self._settle_asked(message.request_id, None)  # the answer came first
            elif isinstance(message, Progress):
                self._settle_asked(message.request_id, message)
            elif isinstance(message, Observed):
                self._on_observed(message.observations)
            elif isinstance(message, JudgesReport):
                self.judge_telemetry = message.telemetry
            elif isinstance(message, Ready):
                if not self.ready.done():
                    self.ready.set_result(message.provenance)
            elif isinstance(message, StartFailed):
                if not self.ready.done():
                    self.ready.set_exception(RuntimeError(message.problem))
            else:
                log.error("scoring worker %d sent a message it has no use for: %.200r", self.index, message)

    def _settle_asked(self, request_id: int, progress: Progress | None) -> None:
        future = self._asked.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(progress)

    def _lost(self) -> None:
        self.lost = True
        error = WorkerLost(f"scoring worker process exited (code {self._process.exitcode}) while scoring")
        if not self.ready.done():
            self.ready.set_exception(
                RuntimeError(f"worker exited with code {self._process.exitcode} before it was ready")
            )
        pending = list(self.pending.values())
        self.pending.clear()
        for future, _ in pending:
            if not future.done():
                future.set_exception(error)
        for request_id in list(self._asked):
            self._settle_asked(request_id, None)
        self._on_lost(self)
