"""Partition ownership and the exactly-once fence on the real PostgreSQL: advisory locks share the partitions
fairly and die with their connection; a stale owner's batch is refused whole by the offset's compare-and-set."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fleet_support import wait_for
from sqlalchemy import text

from gpuslo.engine.errors import StoreError
from gpuslo.engine.fleet import offsets
from gpuslo.engine.fleet.offsets import Offset
from gpuslo.engine.fleet.ownership import Ownership, assign, weights
from gpuslo.engine.store.db import Database

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_workers_share_partitions_fairly_and_take_over_a_dead_ones(fleet_database: Database) -> None:
    first, second = Ownership(fleet_database, "a"), Ownership(fleet_database, "b")
    partitions = list(range(10))
    first.join()
    assert first.rebalance(partitions) == (set(partitions), set())
    second.join()
    assert first.members() == 2
    assert second.rebalance(partitions) == (set(), set())  # all taken: waits for a release
    claimed, released = first.rebalance(partitions)
    assert claimed == set() and len(released) == 5
    claimed, _ = second.rebalance(partitions)
    assert claimed == released and first.held.isdisjoint(second.held)
    second.leave()  # as a kill: the connection closes and every lock of b goes with it
    wait_for(lambda: first.members() == 1, 5, "b's member lock going with its connection")
    assert first.rebalance(partitions)[0] == released and first.held == set(partitions)
    first.leave()


def _skewed_loads() -> dict[int, int]:
    """The bench's shape at 64 partitions a key space: four busy endpoint partitions (13,500 messages each),
    48 host partitions of about 3,000 and 12 idle ones, nine small job partitions."""
    loads = {n: 13_500 for n in range(4)} | {n: 0 for n in range(4, 64)}
    loads |= {64 + n: 2_300 + 53 * n for n in range(48)} | {112 + n: 0 for n in range(16)}
    loads |= {128 + n: 110 + 120 * n for n in range(9)} | {137 + n: 0 for n in range(55)}
    return loads


def test_the_load_aware_assignment_balances_what_a_count_share_cannot() -> None:
    loads = _skewed_loads()
    partitions = sorted(loads)
    shares = assign(partitions, weights(partitions, loads), list(range(100, 108)))
    assert sorted(n for mine in shares.values() for n in mine) == partitions  # each partition once
    load = [sum(loads[n] for n in mine) for mine in shares.values()]
    assert sum(load) / len(load) / max(load) >= 0.9  # mean over the busiest worker's load
    assert assign(partitions, weights(partitions, loads), [107, 100, 103, 101, 102, 104, 105, 106]) == shares


def test_workers_with_loads_take_their_assigned_partitions(fleet_database: Database) -> None:
    loads = _skewed_loads()
    partitions = sorted(loads)
    first, second = Ownership(fleet_database, "a"), Ownership(fleet_database, "b")
    first.join()
    assert first.rebalance(partitions, loads) == (set(partitions), set())  # alone: every partition
    second.join()
    shares = assign(partitions, weights(partitions, loads), first.member_keys())
    assert second.rebalance(partitions, loads)[0] == set()  # its partitions are a's until a releases them
    claimed, released = first.rebalance(partitions, loads)
    assert claimed == set() and first.held == set(shares[first._key])
    assert second.rebalance(partitions, loads) == (released, set()) and second.held == set(shares[second._key])
    for owner in (first, second):
        assert abs(sum(loads[n] for n in owner.held) - sum(loads.values()) / 2) <= 13_500 / 2
    first.leave()
    second.leave()


def test_one_leader_at_a_time_and_the_next_takes_over(fleet_database: Database) -> None:
    web_a, web_b = (Ownership(fleet_database, name, member=False) for name in ("web-a", "web-b"))
    web_a.join()
    web_b.join()
    assert web_a.members() == 0  # web replicas never count as workers
    assert web_a.lead() and not web_b.lead() and web_a.lead()
    web_a.leave()
    wait_for(web_b.lead, 5, "the next replica taking the leader lock")  # the server ends a's session async
    web_b.leave()


def test_sqlite_is_refused_for_fleet_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    database = Database(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(StoreError, match="fleet mode needs PostgreSQL"):
        Ownership(database, "w")
    database.dispose()


def test_a_stale_owner_cannot_store_a_batch(fleet_database: Database) -> None:
    with fleet_database.session() as session:
        assert offsets.advance(session, "host.0", 0, Offset(10, 5.0, 5.0, 1), "a", NOW)
    with fleet_database.session() as session:  # a second first writer (both read "nothing stored yet")
        assert not offsets.advance(session, "host.0", 0, Offset(12, 6.0, 6.0, 1), "b", NOW)
    with fleet_database.session() as session:
        assert offsets.advance(session, "host.0", 1, Offset(20, 7.0, 7.0, 2), "b", NOW)  # b took over
    with fleet_database.session() as session:  # a, still believing in version 1, is refused
        assert not offsets.advance(session, "host.0", 1, Offset(30, 8.0, 8.0, 2), "a", NOW)
    with fleet_database.session(readonly=True) as session:
        assert offsets.read(session, "host.0") == Offset(20, 7.0, 7.0, 2)
        assert offsets.read(session, "host.1") == Offset()
        owner = session.execute(text("SELECT owner FROM fleet_partitions WHERE partition = 'host.0'")).scalar()
    assert owner == "b"


def test_a_batch_of_partitions_is_advanced_in_one_go_and_only_the_stale_ones_are_refused(
        fleet_database: Database) -> None:
    with fleet_database.session() as session:  # first writes of three partitions
        moves = [(f"host.{i}", 0, Offset(i + 1, 1.0, 1.0, 1)) for i in range(3)]
        assert offsets.advance_all(session, moves, "a", NOW) == set()
    with fleet_database.session() as session:  # host.1 and host.3 (new) by a; host.2 with a version b never read
        refused = offsets.advance_all(session, [("host.1", 1, Offset(5, 2.0, 2.0, 2)),
                                                ("host.2", 7, Offset(6, 2.0, 2.0, 8)),
                                                ("host.3", 0, Offset(4, 2.0, 2.0, 1))], "b", NOW)
        assert refused == {"host.2"}
        session.rollback()  # as store_batches does: the batch is tried again without the lost partition
    with fleet_database.session() as session:
        assert offsets.advance_all(session, [("host.1", 1, Offset(5, 2.0, 2.0, 2)),
                                             ("host.3", 0, Offset(4, 2.0, 2.0, 1))], "b", NOW) == set()
    with fleet_database.session(readonly=True) as session:
        assert [offsets.read(session, f"host.{i}") for i in range(4)] == [
            Offset(1, 1.0, 1.0, 1), Offset(5, 2.0, 2.0, 2), Offset(3, 1.0, 1.0, 1), Offset(4, 2.0, 2.0, 1)]
