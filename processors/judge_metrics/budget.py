"""`budget:` a hard cap on what one judge spends per hour.

`requests_per_hour` counts every HTTP request sent to the judge (retries, structured-
output fallbacks and the circuit breaker's probes included; cache hits cost nothing),
`tokens_per_hour` the input and output tokens the server reported. The hour slides:
spend leaves the window one hour after it was made, kept in one-second steps (3,601
buckets, whatever the request rate), and rounded so that no 3,600 seconds ever hold more
than the cap. With `scoring_workers`, the workers' judges of one processor share one
window in shared memory: the cap holds for all of them together.

A request is sent only while the window holds fewer requests and fewer tokens than the
caps. The request cap is exact even under concurrency: the slot is taken before the
request leaves. The token cap can be passed by the tokens of the requests already in
flight when it is reached, since a reply's size is known only once it arrives
(`max_tokens` bounds it). Past a cap, `reserve` raises `BudgetExhausted`; the judge
metrics record the metrics it stopped as skipped, with its message, not as failures.

Threading: thread-safe, and process-safe for a shared window.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable

from spanscore.processors.judge_metrics.base import JudgeError

if sys.platform == "win32":  # not POSIX: budgets still work, only a shared one (scoring_workers) cannot
    fcntl = None
else:
    import fcntl

BUDGET_EXHAUSTED = "budget_exhausted"  # the error_type of BudgetExhausted
WINDOW_S = 3600
SLOTS = WINDOW_S + 1  # spend of second s is in the window through second s + 3600
_REQUESTS, _TOKENS, _HORIZON, _FIRST_SLOT = 0, 1, 2, 3


class BudgetExhausted(JudgeError):
    """The judge's budget for the hour is spent; no request was sent for this call
    (`calls`: the requests it had spent before)."""

    def __init__(self, message: str, calls: int = 0):
        super().__init__(message, BUDGET_EXHAUSTED, calls)


class ProcessLock:
    """A lock across threads and processes that the kernel releases when its holder dies:
    `flock` on a file, so a worker killed inside the budget's few lines cannot leave the
    others waiting forever (a semaphore would stay taken). Each process opens the file
    on first use; the process that made the lock removes the file when it exits."""

    def __init__(self, path: str | None = None):
        if fcntl is None:
            raise RuntimeError("a judge budget shared by scoring workers needs flock (POSIX)")
        if path is None:
            fd, path = tempfile.mkstemp(prefix="spanscore-budget-", suffix=".lock")
            os.close(fd)
            weakref.finalize(self, _remove, path)
        self.path = path
        self._threads = threading.Lock()
        self._fd: int | None = None

    def __reduce__(self):
        return ProcessLock, (self.path,)

    def __enter__(self) -> None:
        self._threads.acquire()
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._threads.release()
            raise

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:  # opened by __enter__
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class BudgetWindow:
    """The spend of the last hour in one-second buckets, in a flat int64 buffer with a lock.

    Cells: the requests and tokens the window holds, the oldest second not yet expired,
    then per bucket (second, requests, tokens) at slot `second % SLOTS`. Made `shared`,
    the buffer lives in memory that the scoring worker processes are handed when they
    start, under a `ProcessLock`, so every worker's judge draws on one budget, as one
    process would.
    """

    def __init__(self, shared: bool = False):
        size = _FIRST_SLOT + 3 * SLOTS
        if shared:
            self.cells = multiprocessing.get_context("spawn").RawArray("q", size)
            self.lock: threading.Lock | ProcessLock = ProcessLock()
        else:
            self.cells = (ctypes.c_int64 * size)()
            self.lock = threading.Lock()

    def advance(self, second: int) -> tuple[int, int]:
        """Drop what left the window by `second`; the requests and tokens left in it.
        Spend made during second s leaves at second s + 3601, so a window of 3,600 s
        never holds more than a cap. Call with the lock held."""
        cells = self.cells
        horizon, expired_before = cells[_HORIZON], second - WINDOW_S
        if expired_before - horizon >= SLOTS:  # idle for over an hour: every bucket is old
            ctypes.memset(ctypes.addressof(cells), 0, ctypes.sizeof(cells))
        else:
            for old in range(horizon, expired_before):
                base = _FIRST_SLOT + 3 * (old % SLOTS)
                if cells[base] == old:
                    cells[_REQUESTS] -= cells[base + 1]
                    cells[_TOKENS] -= cells[base + 2]
                    cells[base] = cells[base + 1] = cells[base + 2] = 0
        if expired_before > horizon:
            cells[_HORIZON] = expired_before
        return cells[_REQUESTS], cells[_TOKENS]

    def add(self, second: int, requests: int, tokens: int) -> None:
        """Count spend in `second`'s bucket (after `advance(second)`, with the lock held)."""
        cells = self.cells
        base = _FIRST_SLOT + 3 * (second % SLOTS)
        if cells[base] != second:  # the slot's previous bucket expired with advance
            cells[base], cells[base + 1], cells[base + 2] = second, 0, 0
        cells[base + 1] += requests
        cells[base + 2] += tokens
        cells[_REQUESTS] += requests
        cells[_TOKENS] += tokens


class JudgeBudget:
    """Spend over the last hour against `requests_per_hour` and `tokens_per_hour` (either
    may be None: no cap), kept in `window` (this budget's own unless one is given)."""

    def __init__(
        self,
        requests_per_hour: int | None = None,
        tokens_per_hour: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        window: BudgetWindow | None = None,
    ):
        for name, cap in (("requests_per_hour", requests_per_hour), ("tokens_per_hour", tokens_per_hour)):
            if cap is not None and cap < 1:
                raise ValueError(f"budget.{name} must be at least 1, got {cap}")
        self.requests_per_hour = requests_per_hour
        self.tokens_per_hour = tokens_per_hour
        self._clock = clock  # CLOCK_MONOTONIC: one clock for every process of the machine
        self.window = window if window is not None else BudgetWindow()
        self.refused = 0  # requests this process did not send because a cap was reached

    def reserve(self, calls: int = 0) -> None:
        """Count one request about to be sent, or raise BudgetExhausted (carrying `calls`,
        the requests the caller already spent)."""
        window = self.window
        with window.lock:
            second = int(self._clock())
            why = self._exhausted(*window.advance(second))
            if why is None:
                window.add(second, 1, 0)
        if why is not None:
            self.refused += 1
            raise BudgetExhausted(f"judge budget exhausted: {why}", calls)

    def spend(self, tokens: int) -> None:
        """Count the tokens a reply reported."""
        if tokens <= 0:
            return
        window = self.window
        with window.lock:
            second = int(self._clock())
            window.advance(second)
            window.add(second, 0, tokens)

    def remaining_requests(self) -> int | None:
        if self.requests_per_hour is None:
            return None
        return max(0, self.requests_per_hour - self._spent()[0])

    def remaining_tokens(self) -> int | None:
        if self.tokens_per_hour is None:
            return None
        return max(0, self.tokens_per_hour - self._spent()[1])

    def _spent(self) -> tuple[int, int]:
        with self.window.lock:
            return self.window.advance(int(self._clock()))

    def _exhausted(self, requests: int, tokens: int) -> str | None:
        if self.requests_per_hour is not None and requests >= self.requests_per_hour:
            return f"{requests:,} requests in the last hour (requests_per_hour: {self.requests_per_hour:,})"
        if self.tokens_per_hour is not None and tokens >= self.tokens_per_hour:
            return f"{tokens:,} tokens in the last hour (tokens_per_hour: {self.tokens_per_hour:,})"
        return None
