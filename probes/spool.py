"""Durable local spool of events in SQLite: append, read a batch in order, ack once the server took it."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spooled (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL,
                                    body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('dropped', 0);
"""
STATUS_RESERVE = 64


@dataclass(frozen=True)
class SpooledEvent:
    """One event waiting in the spool: its order number, id and canonical JSON body."""

    seq: int
    event_id: str
    body: str

    def as_json(self) -> dict[str, object]:
        decoded: dict[str, object] = json.loads(self.body)
        return decoded


class Spool:
    """Events in arrival order, kept on disk until acknowledged; bounded, counting what it had to drop.

    When full, new events are dropped rather than old ones: the first events of an incident carry its cause.
    `path=None` keeps the spool in memory (for an in-process reporter that may lose events on exit).
    """

    def __init__(self, path: Path | None, max_events: int = 100_000):
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self.path = path
        self.max_events = max_events
        self._lock = threading.Lock()
        target = ":memory:"
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            target = str(path)
        try:
            # One connection shared by the scheduler's threads, serialized by the lock.
            self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: an append that returned must survive kill -9 and power loss.
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise ProbeError(f"{target}: cannot open the event spool: {exc}") from exc

    def append(self, events: Iterable[Event], *, reserved: bool = False) -> int:
        """Store events in one transaction; returns how many were kept (the rest counted as dropped).

        `reserved` lets the agent's own status events use a small reserve past the bound, so the report
        that the spool is full is not itself dropped.
        """
        rows = [(e.id, json.dumps(e.to_dict(), sort_keys=True, separators=(",", ":"))) for e in events]
        if not rows:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (count,) = self._db.execute("SELECT COUNT(*) FROM spooled").fetchone()
                room = max(0, self.max_events + (STATUS_RESERVE if reserved else 0) - count)
                kept, lost = rows[:room], len(rows) - min(room, len(rows))
                self._db.executemany("INSERT INTO spooled (event_id, body) VALUES (?, ?)", kept)
                if lost:
                    self._db.execute("UPDATE counters SET value = value + ? WHERE name = 'dropped'", (lost,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(kept)

    def read_batch(self, limit: int) -> list[SpooledEvent]:
        """The oldest `limit` events not yet acknowledged, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, event_id, body FROM spooled ORDER BY seq LIMIT ?", (limit,)).fetchall()
        return [SpooledEvent(seq, event_id, body) for seq, event_id, body in rows]

    def ack(self, seqs: Sequence[int]) -> None:
        """Forget events the server has answered for."""
        if not seqs:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM spooled WHERE seq = ?", [(s,) for s in seqs])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    @property
    def dropped(self) -> int:
        """Events refused because the spool was full, over the spool's whole life (kept across restarts)."""
        with self._lock:
            (value,) = self._db.execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        return int(value)

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM spooled").fetchone()
        return int(count)

    def close(self) -> None:
        with self._lock:
            self._db.close()
