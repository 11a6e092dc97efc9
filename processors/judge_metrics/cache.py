"""Judge answers cached by request: an in-memory LRU, optionally backed by SQLite.

Scoring the same trace twice (a replayed file, a rerun after changing an unrelated
metric) asks the judge the same questions; with temperature 0 the answer is as good as
the last one and costs nothing. The key is the sha256 of the canonical JSON of
everything that shapes the answer: model, messages, schema, schema name, temperature.

The SQLite file lets an offline rerun reuse a previous run's answers: one table, WAL
mode so that a reader never waits for a writer, every call run in a worker thread so
the event loop never blocks on disk. A row that fails to decode, or a disk error, is a
miss (logged), never a failed score.

Only validated answers are stored (the judge's job); values handed out are copies, so a
caller mutating its answer cannot change what the next caller gets.

Threading: the LRU and the connection each sit behind a lock; `get`/`put` are
coroutines safe to call from any event loop.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_ENTRIES = 10_000

_log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judge_answers (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    answer TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def cache_key(
    model: str,
    messages: list[dict[str, Any]],
    schema: dict[str, Any],
    schema_name: str,
    temperature: float,
) -> str:
    """Hex sha256 of the request's canonical JSON (sorted keys, no whitespace)."""
    canonical = json.dumps(
        {
            "model": model,
            "messages": messages,
            "schema": schema,
            "schema_name": schema_name,
            "temperature": temperature,
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class JudgeCacheStats:
    hits: int  # from memory or disk
    disk_hits: int
    misses: int
    entries: int  # in memory
    max_entries: int


class JudgeCache:
    """`max_entries` answers in memory (0: none), and every answer in `sqlite_path` when set."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, sqlite_path: str | Path | None = None):
        if max_entries < 0:
            raise ValueError(f"max_entries cannot be negative, got {max_entries}")
        self.max_entries = max_entries
        self.sqlite_path = Path(sqlite_path) if sqlite_path is not None else None
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._hits = self._disk_hits = self._misses = 0

    def __repr__(self) -> str:
        return f"JudgeCache(max_entries={self.max_entries}, sqlite_path={self.sqlite_path!r})"

    def stats(self) -> JudgeCacheStats:
        with self._lock:
            return JudgeCacheStats(self._hits, self._disk_hits, self._misses, len(self._entries), self.max_entries)

    async def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return copy.deepcopy(found)
        if self.sqlite_path is not None:
            try:
                found = await asyncio.to_thread(self._read, key)
            except (sqlite3.Error, OSError) as error:  # a broken disk cache costs a request, not a score
                _log.warning("judge cache %s: read failed: %s", self.sqlite_path, error)
                found = None
            if found is not None:
                with self._lock:
                    self._hits += 1
                    self._disk_hits += 1
                self._remember(key, found)
                return copy.deepcopy(found)
        with self._lock:
            self._misses += 1
        return None

    async def put(self, key: str, model: str, answer: dict[str, Any]) -> None:
        self._remember(key, copy.deepcopy(answer))
        if self.sqlite_path is not None:
            try:
                await asyncio.to_thread(self._write, key, model, json.dumps(answer, ensure_ascii=False))
            except (sqlite3.Error, OSError) as error:
                _log.warning("judge cache %s: write failed: %s", self.sqlite_path, error)

    async def close(self) -> None:
        with self._db_lock:
            db, self._db = self._db, None
        if db is not None:
            await asyncio.to_thread(db.close)

    # -- memory ----------------------------------------------------------------------
    def _remember(self, key: str, answer: dict[str, Any]) -> None:
        if self.max_entries == 0:
            return
        with self._lock:
            self._entries[key] = answer
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    # -- disk (worker threads) -------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        # Called with _db_lock held.
        if self._db is None:
            assert self.sqlite_path is not None
            self.sqlite_path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.sqlite_path, check_same_thread=False, timeout=30.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL keeps it consistent; a lost answer is re-asked
            db.execute(_SCHEMA)
            db.commit()
            self._db = db
        return self._db

    def _read(self, key: str) -> dict[str, Any] | None:
        with self._db_lock:
            row = self._connection().execute("SELECT answer FROM judge_answers WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            answer = json.loads(row[0])
        except ValueError:
            _log.warning("judge cache %s: undecodable row for key %s, ignored", self.sqlite_path, key)
            return None
        return answer if isinstance(answer, dict) else None

    def _write(self, key: str, model: str, answer: str) -> None:
        with self._db_lock:
            db = self._connection()
            db.execute(
                "INSERT OR REPLACE INTO judge_answers (key, model, answer, created_at) VALUES (?, ?, ?, ?)",
                (key, model, answer, time.time()),
            )
            db.commit()


__all__ = ["DEFAULT_MAX_ENTRIES", "JudgeCacheStats", "JudgeCache", "cache_key"]
