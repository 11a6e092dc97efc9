"""Client errors in the log: a few short lines, whatever the rate at which clients err.

A receiver open to many clients sees their mistakes by the thousand: a wrong token, a
connection dropped mid-body, a request that does not parse. A line (let alone a
traceback) per request would fill the disk and bury the collector's own problems, and a
client could write what it liked into the log. So, per class of error, the first one is
logged as one short line, its detail quoted (`excerpt`: escaped, cut short); the ones after
it are counted, and the count is logged as one line at the end of the interval, interval
after interval while they keep coming. A class is a fixed text the caller chooses
(`401 missing or invalid credentials`), never the client's, so there are few of them.
Tracebacks are for the collector's own faults; a client's error never gets one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from spanscore.core.durations import format_duration
from spanscore.core.quoting import excerpt

INTERVAL_S = 60.0


@dataclass
class _Interval:
    level: int
    started: float
    timer: asyncio.TimerHandle
    count: int = 0


class ClientErrorLog:
    """Logs client errors to `log` at most one line per class of error and interval.

    Threading: the event loop's; `record` is called on it (an interval ends with a timer).
    Lifecycle: `flush` at stop logs the counts not logged yet.
    """

    def __init__(self, log: logging.Logger, interval_s: float = INTERVAL_S):
        self._log = log
        self.interval_s = interval_s
        self._open: dict[str, _Interval] = {}

    def record(self, error: str, detail: str = "", level: int = logging.INFO) -> None:
        """One more error of class `error`; `detail` (who sent it, what was wrong: the
        client's text is welcome, it is quoted) is logged with the first of an interval."""
        interval = self._open.get(error)
        if interval is not None:
            interval.count += 1
            return
        self._log.log(
            level,
            "%s%s (a client error; more in the next %s are counted)",
            error,
            f": {excerpt(detail)}" if detail else "",
            format_duration(self.interval_s),
        )
        self._start(error, level)

    def flush(self) -> None:
        """Log the counts not logged yet; nothing is counted after (until the next `record`)."""
        now = asyncio.get_running_loop().time()
        for error, interval in self._open.items():
            interval.timer.cancel()
            if interval.count:
                self._log_count(error, interval, now - interval.started)
        self._open.clear()

    def _start(self, error: str, level: int) -> None:
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self.interval_s, self._end, error)
        self._open[error] = _Interval(level, loop.time(), timer)

    def _end(self, error: str) -> None:
        interval = self._open.pop(error)
        if interval.count:
            self._log_count(error, interval, self.interval_s)
            self._start(error, interval.level)  # still coming: the next interval is counted too

    def _log_count(self, error: str, interval: _Interval, elapsed_s: float) -> None:
        elapsed = format_duration(elapsed_s)
        self._log.log(interval.level, "%s: %d more in the last %s", error, interval.count, elapsed)


class ServerLog(logging.LoggerAdapter):
    """A web server's own log (aiohttp's `logger`): an exception the client caused (a
    request the server could not parse) is recorded in `client_errors` as one of class
    `error`; anything else keeps its traceback.

    `client_fault(exc)` is what was wrong when `exc` is the client's doing, else None.
    """

    def __init__(
        self,
        logger: logging.Logger,
        client_errors: ClientErrorLog,
        error: str,
        client_fault: Callable[[BaseException], str | None],
    ):
        super().__init__(logger)
        self._client_errors = client_errors
        self._error = error
        self._client_fault = client_fault

    def exception(self, msg, *args, exc_info=True, **kwargs) -> None:
        fault = self._client_fault(exc_info) if isinstance(exc_info, BaseException) else None
        if fault is None:
            super().exception(msg, *args, exc_info=exc_info, **kwargs)
            return
        # aiohttp's message is "Error handling request from %s", the client's address.
        where = f"from {args[0]}" if args else msg
        self._client_errors.record(self._error, f"{where}: {fault}")
