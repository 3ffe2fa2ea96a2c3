"""The cited events of a fleet batch are stored in a short transaction of their own (partition.store_cited),
committed before the batch's transaction: on the real PostgreSQL, a worker whose batch cites events another
worker's still-open batch also cites does not wait for that transaction; an event stored for a batch that then
fails is harmless (the batch's next store takes it as a duplicate, each event is stored once)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.fleet.offsets import Offset
from gpuslo.engine.fleet.partition import (
    LostPartition,
    PartitionRunner,
    PartitionSettings,
    Pending,
    _write,
    store_cited,
)
from gpuslo.engine.fleet.routing import Partition
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database

START = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
BOUND_S = 5.0  # B's store and batch, alone, take milliseconds; waiting for A's open transaction never ends


def _events(ids: list[str]) -> list[Event]:
    return [parse_event({"id": i, "kind": "probe_status", "host": "node-1", "source": "event-store-test",
                         "time": format_time(START + timedelta(seconds=n)), "attrs": {"probe": "nvml", "state": "up"}})
            for n, i in enumerate(ids)]


def _pending(database: Database, name: str, number: int, events: list[Event], version: int = 0) -> Pending:
    """A batch of one partition that stores every event it read (store_events="all"), its offset at `version`."""
    runner = PartitionRunner(Partition(name, 0, number, 1), [], bus=None, database=database,  # type: ignore[arg-type]
                             owner=name, notify=lambda *_: None, metrics=Metrics(),
                             settings=PartitionSettings(store_events="all"))
    runner.offset = Offset(seq=version, version=version)
    return Pending(runner, [EngineResult(tuple(events), ())], Offset(seq=version + 1, version=version + 1),
                   len(events), True)


def _store(database: Database, item: Pending, owner: str) -> None:
    """What store_batches does for one batch that stores: the cited events, then the batch's transaction."""
    stored = store_cited(database, [item])
    with database.session(rederivable=True) as session:
        _write(session, [item], owner, lambda *_: None, (), stored)


def _in_thread(work: object) -> tuple[threading.Thread, list[object]]:
    done: list[object] = []

    def run() -> None:
        started = time.monotonic()
        work()  # type: ignore[operator]
        done.append(time.monotonic() - started)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def test_an_open_batch_citing_the_same_events_does_not_hold_up_another_workers_store(
        fleet_database: Database) -> None:
    shared = _events(["e1", "e2", "e3", "e4"])
    a = _pending(fleet_database, "a", 1, shared[:3])
    b = _pending(fleet_database, "b", 2, shared[1:])
    with ExitStack() as stack:  # A: its events stored, its batch transaction open, citing them (the FK's lock)
        stored_a = store_cited(fleet_database, [a])
        session_a = stack.enter_context(fleet_database.session(rederivable=True))
        _write(session_a, [a], "a", lambda *_: None, (), stored_a)
        session_a.execute(text("SELECT id FROM events WHERE id = ANY(:ids) FOR KEY SHARE"), {"ids": list(stored_a)})
        thread, done = _in_thread(lambda: _store(fleet_database, b, "b"))
        thread.join(BOUND_S)
        assert done, f"worker b's store waited more than {BOUND_S} s on worker a's open batch transaction"
    thread.join(BOUND_S)
    with fleet_database.engine.connect() as connection:
        rows = connection.execute(text("SELECT id, processed_at IS NOT NULL FROM events ORDER BY id")).all()
        offsets = connection.execute(text("SELECT partition, version, owner FROM fleet_partitions "
                                          "ORDER BY partition")).all()
    assert [tuple(r) for r in rows] == [("e1", True), ("e2", True), ("e3", True), ("e4", True)]
    assert [tuple(r) for r in offsets] == [("a.0", 1, "a"), ("b.0", 1, "b")]


def test_the_arrangement_replaced_waits_for_the_whole_open_transaction(fleet_database: Database) -> None:
    """The control: with A's insert inside its open batch transaction (as before store_cited), B's store of an
    overlapping event waits until A ends; this is what the test above would see without the change."""
    shared = _events(["e1", "e2", "e3"])
    b = _pending(fleet_database, "b", 2, shared[1:])
    with fleet_database.session(rederivable=True) as session_a:
        repository.store_events(session_a, shared[:2])
        thread, done = _in_thread(lambda: _store(fleet_database, b, "b"))
        thread.join(1.0)
        assert not done and thread.is_alive()  # waiting on e2, inserted by A's uncommitted transaction
    thread.join(BOUND_S)
    assert done


def test_events_stored_for_a_batch_that_then_fails_are_harmless(fleet_database: Database) -> None:
    events = _events(["e1", "e2"])
    other = _pending(fleet_database, "p", 1, events[:1])
    _store(fleet_database, other, "other")  # "other" owns partition p.0 now (version 1)
    stale = _pending(fleet_database, "p", 1, events)  # a stale owner, still at version 0
    stored = store_cited(fleet_database, [stale])
    try:
        with fleet_database.session(rederivable=True) as session:
            _write(session, [stale], "stale", lambda *_: None, (), stored)
        raise AssertionError("the stale owner's batch was stored")
    except LostPartition:
        pass
    with fleet_database.engine.connect() as connection:  # e2 is stored, and nothing else of the stale batch
        assert connection.execute(text("SELECT count(*) FROM events")).scalar() == 2
        assert connection.execute(text("SELECT owner, version FROM fleet_partitions")).one() == ("other", 1)
    again = _pending(fleet_database, "p", 1, events, version=1)  # the owner reads the batch: stores it again
    _store(fleet_database, again, "other")
    with fleet_database.engine.connect() as connection:
        rows = connection.execute(text("SELECT id, processed_at IS NOT NULL FROM events ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [("e1", True), ("e2", True)]
        assert connection.execute(text("SELECT owner, version FROM fleet_partitions")).one() == ("other", 2)
