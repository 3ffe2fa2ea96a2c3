"""Who owns which partition: PostgreSQL session advisory locks on one dedicated connection per worker.

Each worker holds a member lock while it lives, so the live workers are the granted member locks of this
database (pg_locks); a worker that dies loses its connection and with it every lock at once. Given the partitions'
loads (their messages on the stream, coarsened so that every worker reads the same weights), every worker computes
the same assignment over the members' lock keys: heaviest partition first, each to the least loaded member
(`assign`). It releases what is not its own and claims what is and is free, so joining and leaving workers move
partitions within a rebalance interval or two. A partition's load is not its count: one key space may have four
busy partitions and sixty idle ones. Without loads it aims at ceil(partitions / members) by count, as before.
The locks only decide who works; the offset's compare-and-set (offsets.advance) is what makes a stale owner's
write impossible.
"""

from __future__ import annotations

import math
import secrets
import zlib
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, text

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store.db import Database

MEMBER_CLASS = 0x6753  # advisory lock key spaces (the two-int form): worker membership, partitions, the leader
PARTITION_CLASS = 0x6750
LEADER_CLASS = 0x674C
_MEMBER_KEYS = text("SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :cls "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
_MEMBERS = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :cls "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")


class Ownership:
    """One worker's locks; every method raises StoreError when the connection (and so every lock) is lost."""

    def __init__(self, database: Database, worker: str, *, member: bool = True):
        if database.dialect != "postgresql":
            raise StoreError(f"fleet mode needs PostgreSQL (advisory locks); {database!r} is {database.dialect}")
        self.worker = worker
        self._member = member  # False: a web replica that only competes for the leader lock
        self._database = database
        self._connection: Connection | None = None
        self.held: set[int] = set()
        self._leader = False
        self._key = 0

    def join(self) -> None:
        """Open the lock connection and take a member lock."""
        self.leave()
        try:
            self._connection = self._database.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            if self._member:
                self._key = secrets.randbelow(2**31)
                self._connection.execute(text("SELECT pg_advisory_lock(:cls, :key)"),
                                         {"cls": MEMBER_CLASS, "key": self._key})
        except Exception as exc:
            self.leave()
            raise StoreError(f"fleet worker {self.worker}: joining: {exc}") from exc

    @property
    def key(self) -> int:
        """This worker's member lock key (0 before it joined)."""
        return self._key

    @property
    def connected(self) -> bool:
        return self._connection is not None

    def release(self, number: int) -> None:
        if number in self.held:
            self._scalar("SELECT pg_advisory_unlock(:cls, :key)", cls=PARTITION_CLASS, key=number)
            self.held.discard(number)

    def leave(self) -> None:
        """Close the lock connection: every lock of this worker goes with it."""
        connection, self._connection = self._connection, None
        self.held.clear()
        self._leader = False
        if connection is not None:
            try:
                connection.invalidate()  # really close it: back in the pool it would keep holding the locks
                connection.close()
            except Exception:  # noqa: BLE001 - the connection may already be gone
                pass

    def _scalar(self, statement: str, **params: int) -> object:
        if self._connection is None:
            raise StoreError(f"fleet worker {self.worker}: not joined")
        try:
            return self._connection.execute(text(statement), params).scalar()
        except Exception as exc:
            self.leave()
            raise StoreError(f"fleet worker {self.worker}: lock connection lost: {exc}") from exc

    def members(self) -> int:
        if self._connection is None:
            raise StoreError(f"fleet worker {self.worker}: not joined")
        try:
            return int(self._connection.execute(_MEMBERS, {"cls": MEMBER_CLASS}).scalar() or 0)
        except Exception as exc:
            self.leave()
            raise StoreError(f"fleet worker {self.worker}: lock connection lost: {exc}") from exc

    def member_keys(self) -> list[int]:
        if self._connection is None:
            raise StoreError(f"fleet worker {self.worker}: not joined")
        try:
            return sorted(int(k) for k in self._connection.execute(_MEMBER_KEYS, {"cls": MEMBER_CLASS}).scalars())
        except Exception as exc:
            self.leave()
            raise StoreError(f"fleet worker {self.worker}: lock connection lost: {exc}") from exc

    def rebalance(self, partitions: Sequence[int], loads: Mapping[int, int] | None = None) -> tuple[set[int], set[int]]:
        """Claim and release toward this worker's part of the load-aware assignment (`loads`: messages per
        partition number), or toward the fair share by count without loads; returns (claimed, released)."""
        if loads is not None and self._member:
            keys = self.member_keys()
            if self._key in keys:
                return self._toward(set(assign(partitions, weights(partitions, loads), keys)[self._key]))
        target = math.ceil(len(partitions) / max(1, self.members()))
        order = sorted(partitions, key=lambda n: zlib.crc32(f"{self.worker}:{n}".encode()))  # rendezvous order
        released = set()
        for number in reversed(order):
            if len(self.held) <= target:
                break
            if number in self.held:
                self._scalar("SELECT pg_advisory_unlock(:cls, :key)", cls=PARTITION_CLASS, key=number)
                self.held.discard(number)
                released.add(number)
        claimed = set()
        for number in order:
            if len(self.held) >= target:
                break
            if number not in self.held and self._scalar("SELECT pg_try_advisory_lock(:cls, :key)",
                                                        cls=PARTITION_CLASS, key=number):
                self.held.add(number)
                claimed.add(number)
        return claimed, released

    def _toward(self, mine: set[int]) -> tuple[set[int], set[int]]:
        released = set()
        for number in sorted(self.held - mine):
            self._scalar("SELECT pg_advisory_unlock(:cls, :key)", cls=PARTITION_CLASS, key=number)
            self.held.discard(number)
            released.add(number)
        claimed = set()
        for number in sorted(mine - self.held):  # one still held by its last owner: at a later rebalance
            if self._scalar("SELECT pg_try_advisory_lock(:cls, :key)", cls=PARTITION_CLASS, key=number):
                self.held.add(number)
                claimed.add(number)
        return claimed, released

    def lead(self) -> bool:
        """Whether this process holds (or now takes) the fleet's leader lock: scheduler jobs run only there."""
        if self._connection is None:
            return False
        if not self._leader:  # taken once: a session lock is re-entrant and would count up on every call
            self._leader = bool(self._scalar("SELECT pg_try_advisory_lock(:cls, 0)", cls=LEADER_CLASS))
        return self._leader


LEVELS = 64  # load levels: two workers reading the stream's counts a moment apart compute the same weights


def weights(partitions: Sequence[int], loads: Mapping[int, int]) -> dict[int, int]:
    """Each partition's weight, 1..LEVELS+1: its load over the busiest one's, coarsened (an idle one weighs 1)."""
    top = max((loads.get(n, 0) for n in partitions), default=0)
    return {n: 1 + (round(LEVELS * loads.get(n, 0) / top) if top else 0) for n in partitions}


def assign(partitions: Sequence[int], weight: Mapping[int, int], keys: Sequence[int]) -> dict[int, list[int]]:
    """The partitions of each member key: heaviest first, each to the member with the least weight so far (then
    the fewest partitions, then the lowest key); the same answer in every worker for the same inputs."""
    members = sorted(set(keys))
    out: dict[int, list[int]] = {key: [] for key in members}
    load = {key: 0 for key in members}
    for number in sorted(partitions, key=lambda n: (-weight[n], n)):
        key = min(members, key=lambda k: (load[k], len(out[k]), k))
        out[key].append(number)
        load[key] += weight[number]
    return out
