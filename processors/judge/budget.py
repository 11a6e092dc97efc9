"""`budget:` a hard cap on what one judge spends per hour.

`requests_per_hour` counts every HTTP request sent to the judge (retries, structured-
output fallbacks and the circuit breaker's probes included; cache hits cost nothing),
`tokens_per_hour` the input and output tokens the server reported. The hour slides:
spend leaves the window one hour after it was made, kept in one-second steps (at most
3,600 entries, whatever the request rate), and rounded so that no 3,600 seconds ever
hold more than the cap.

A request is sent only while the window holds fewer requests and fewer tokens than the
caps. The request cap is exact even under concurrency: the slot is taken before the
request leaves. The token cap can be passed by the tokens of the requests already in
flight when it is reached, since a reply's size is known only once it arrives
(`max_tokens` bounds it). Past a cap, `reserve` raises `BudgetExhausted`; the judge
metrics record the metrics it stopped as skipped, with its message, not as failures.

Threading: thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from spanscore.processors.judge.base import JudgeError

BUDGET_EXHAUSTED = "budget_exhausted"  # the error_type of BudgetExhausted
WINDOW_S = 3600


class BudgetExhausted(JudgeError):
    """The judge's budget for the hour is spent; no request was sent for this call
    (`calls`: the requests it had spent before)."""

    def __init__(self, message: str, calls: int = 0):
        super().__init__(message, BUDGET_EXHAUSTED, calls)


class JudgeBudget:
    """Spend over the last hour against `requests_per_hour` and `tokens_per_hour` (either
    may be None: no cap)."""

    def __init__(self, requests_per_hour: int | None = None, tokens_per_hour: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        for name, cap in (("requests_per_hour", requests_per_hour), ("tokens_per_hour", tokens_per_hour)):
            if cap is not None and cap < 1:
                raise ValueError(f"budget.{name} must be at least 1, got {cap}")
        self.requests_per_hour = requests_per_hour
        self.tokens_per_hour = tokens_per_hour
        self._clock = clock
        self._lock = threading.Lock()
        self._window: deque[list[int]] = deque()  # [second, requests, tokens], oldest first
        self._requests = 0
        self._tokens = 0
        self.refused = 0  # requests not sent because a cap was reached

    def reserve(self, calls: int = 0) -> None:
        """Count one request about to be sent, or raise BudgetExhausted (carrying `calls`,
        the requests the caller already spent)."""
        with self._lock:
            second = self._advance()
            why = self._exhausted()
            if why is not None:
                self.refused += 1
                raise BudgetExhausted(f"judge budget exhausted: {why}", calls)
            self._requests += 1
            self._bucket(second)[1] += 1

    def spend(self, tokens: int) -> None:
        """Count the tokens a reply reported."""
        if tokens <= 0:
            return
        with self._lock:
            second = self._advance()
            self._tokens += tokens
            self._bucket(second)[2] += tokens

    def remaining_requests(self) -> int | None:
        if self.requests_per_hour is None:
            return None
        with self._lock:
            self._advance()
            return max(0, self.requests_per_hour - self._requests)

    def remaining_tokens(self) -> int | None:
        if self.tokens_per_hour is None:
            return None
        with self._lock:
            self._advance()
            return max(0, self.tokens_per_hour - self._tokens)

    def _exhausted(self) -> str | None:
        if self.requests_per_hour is not None and self._requests >= self.requests_per_hour:
            return f"{self._requests:,} requests in the last hour (requests_per_hour: {self.requests_per_hour:,})"
        if self.tokens_per_hour is not None and self._tokens >= self.tokens_per_hour:
            return f"{self._tokens:,} tokens in the last hour (tokens_per_hour: {self.tokens_per_hour:,})"
        return None

    def _advance(self) -> int:
        """Drop what left the window; the current second. Spend made during second s
        leaves at second s + 3601, so a window of 3,600 s never holds more than a cap."""
        second = int(self._clock())
        window = self._window
        while window and window[0][0] < second - WINDOW_S:
            _, requests, tokens = window.popleft()
            self._requests -= requests
            self._tokens -= tokens
        return second

    def _bucket(self, second: int) -> list[int]:
        if not self._window or self._window[-1][0] != second:
            self._window.append([second, 0, 0])
        return self._window[-1]
