"""The durable spool: order, acknowledgement, reopening, and the bound with its drop counter."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.spool import STATUS_RESERVE, Spool


def _events(make_event: Callable[..., Event], n: int) -> list[Event]:
    return [make_event() for _ in range(n)]


def test_batches_come_out_in_order_and_ack_removes_only_those(tmp_path: Path, make_event) -> None:
    spool = Spool(tmp_path / "spool.db")
    events = _events(make_event, 5)
    assert spool.append(events) == 5
    first = spool.read_batch(3)
    assert [s.event_id for s in first] == ["ev-1", "ev-2", "ev-3"]
    assert parse_event(first[0].as_json()) == events[0]
    spool.ack([first[0].seq, first[2].seq])
    assert [s.event_id for s in spool.read_batch(10)] == ["ev-2", "ev-4", "ev-5"]
    assert len(spool) == 3
    spool.close()


def test_events_survive_closing_and_reopening(tmp_path: Path, make_event) -> None:
    path = tmp_path / "spool.db"
    spool = Spool(path)
    spool.append(_events(make_event, 4))
    spool.ack([spool.read_batch(1)[0].seq])
    spool.close()
    again = Spool(path)
    assert [s.event_id for s in again.read_batch(10)] == ["ev-2", "ev-3", "ev-4"]
    again.close()


def test_spool_uses_wal_and_full_sync(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    assert spool._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert spool._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    spool.close()


def test_full_spool_drops_new_events_and_counts_them_across_restarts(tmp_path: Path, make_event) -> None:
    path = tmp_path / "spool.db"
    spool = Spool(path, max_events=3)
    assert spool.append(_events(make_event, 2)) == 2
    assert spool.append(_events(make_event, 4)) == 1
    assert spool.dropped == 3
    assert [s.event_id for s in spool.read_batch(10)] == ["ev-1", "ev-2", "ev-3"]
    spool.close()
    again = Spool(path, max_events=3)
    assert again.dropped == 3
    assert again.append(_events(make_event, 1)) == 0
    assert again.dropped == 4
    # Status events may use the reserve, so the report of the drops is not dropped itself.
    assert again.append(_events(make_event, STATUS_RESERVE + 1), reserved=True) == STATUS_RESERVE
    assert again.dropped == 5
    again.close()


def test_a_failed_append_stores_nothing(tmp_path: Path, make_event) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool._db.execute("CREATE TRIGGER refuse BEFORE INSERT ON spooled WHEN NEW.event_id = 'ev-2' "
                      "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(sqlite3.IntegrityError):
        spool.append(_events(make_event, 3))
    assert len(spool) == 0
    assert spool.append([make_event(id="later")]) == 1
    assert json.loads(spool.read_batch(1)[0].body)["id"] == "later"
    spool.close()
