"""The evidence rows of the violations one write changes: link each match's events once, trim to EVIDENCE_LIMIT.

A violation keeps its first EVIDENCE_KEEP_FIRST evidence events and the latest up to EVIDENCE_LIMIT. The batch
reads, per violation, what it already holds of the batch's events and, where the batch may pass the limit, the
positions a trim can reach (driver SQL, driver_select.py); it links and trims in memory and writes the trims
with one executemany and the links with one statement (driver_sql.py's write_rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import CompoundSelect, Connection, bindparam, delete, func, insert, select, union_all

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store.driver_select import driver_select
from gpuslo.engine.store.driver_sql import driver_statement
from gpuslo.engine.store.models import EVIDENCE_KEEP_FIRST, EVIDENCE_LIMIT, EvidenceRow
from gpuslo.engine.store.rows import chunks

Pair = tuple[str, str]
_CHUNK = 250  # ids per IN (...)
_KEEP_LATEST = EVIDENCE_LIMIT - EVIDENCE_KEEP_FIRST

_EVIDENCE = EvidenceRow.__table__
_E = _EVIDENCE.c
_STATS = (select(_E.violation_id, func.max(_E.position), func.count())
          .where(_E.violation_id.in_(bindparam("ids", expanding=True))).group_by(_E.violation_id))
_LINKED = select(_E.violation_id, _E.event_id, _E.position).where(
    _E.violation_id.in_(bindparam("ids", expanding=True)), _E.event_id.in_(bindparam("events", expanding=True)))
# The `upto` lowest positions of each violation: all a trim can reach (see Evidence.__init__), not all 200. One
# index range scan per violation with its own LIMIT, joined by UNION ALL (a window function over the chunk read
# every position of every violation and sorted them: the largest statement of the stress stream's batches).
_POSITIONS: dict[int, CompoundSelect[tuple[int, int]]] = {}  # by the number of violations asked


def _lowest_positions(count: int) -> CompoundSelect[tuple[int, int]]:
    found = _POSITIONS.get(count)
    if found is None:
        parts = [select(_E.violation_id, _E.position).where(_E.violation_id == bindparam(f"id{i}"))
                 .order_by(_E.position).limit(bindparam(f"upto{i}")).subquery() for i in range(count)]
        found = union_all(*(select(part.c.violation_id, part.c.position) for part in parts))
        _POSITIONS[count] = found
    return found


_TRIM = delete(_EVIDENCE).where(_E.violation_id == bindparam("violation"),
                                            _E.position > bindparam("after"), _E.position < bindparam("before"))
_LINK = insert(_EVIDENCE)


@dataclass
class _Held:
    """A violation's evidence as the batch sees it: the batch's events already linked (event → position), the
    last position, the number of rows and, where this batch may pass EVIDENCE_LIMIT, its positions in order
    (those no trim of the batch can reach as None)."""

    violation_id: int
    linked: dict[str, int] = field(default_factory=dict)
    position: int = 0
    count: int = 0
    positions: list[int | None] | None = None
    trimmed: tuple[int, int] | None = None  # positions strictly between these are gone


class Evidence:
    """The evidence of one write's violations: read once, linked in memory, written by `write`."""

    def __init__(self, connection: Connection, ids: Mapping[Pair, int], opened: set[Pair],
                 wanted: Mapping[Pair, set[str]]):
        """`ids`: each pair's violation; `opened`: those this write inserts (nothing linked yet); `wanted`: the
        events the write's matches cite, per pair."""
        self._connection = connection
        self._links: list[dict[str, Any]] = []
        self._held = {pair: _Held(ids[pair]) for pair in wanted}
        existing = {held.violation_id: held for pair, held in self._held.items() if pair not in opened}
        events = list(dict.fromkeys(i for pair in wanted if pair not in opened for i in wanted[pair]))
        dialect = connection.dialect
        for chunk in chunks(list(existing), _CHUNK):
            for violation_id, position, count in driver_select(dialect, _STATS).rows(connection, {"ids": chunk}):
                existing[violation_id].position, existing[violation_id].count = position or 0, count
            for events_chunk in chunks(events, _CHUNK):
                for violation_id, event_id, position in driver_select(dialect, _LINKED).rows(
                        connection, {"ids": chunk, "events": events_chunk}):
                    existing[violation_id].linked[event_id] = position
        crowded: dict[int, list[int | None]] = {
            held.violation_id: [] for pair, held in self._held.items()
            if held.count + len(wanted[pair] - held.linked.keys()) > EVIDENCE_LIMIT}
        # A trim reads the position at index len - _KEEP_LATEST of the list; each new link moves that index on by
        # one at most, so the lowest max(KEEP_FIRST, count - _KEEP_LATEST) + 1 + (links this batch may add) are
        # all it can reach. The rest stand in as None (never read), keeping the list's length and order.
        upto = {held.violation_id: max(EVIDENCE_KEEP_FIRST, held.count - _KEEP_LATEST) + 1 + len(wanted[pair])
                for pair, held in self._held.items() if held.violation_id in crowded}
        for chunk in chunks([violation_id for violation_id in crowded if violation_id in existing], _CHUNK):
            parameters = {f"{name}{i}": value for i, violation_id in enumerate(chunk)
                          for name, value in (("id", violation_id), ("upto", upto[violation_id]))}
            lowest: dict[int, list[int]] = {violation_id: [] for violation_id in chunk}
            for violation_id, position in driver_select(dialect, _lowest_positions(len(chunk))).rows(connection,
                                                                                                    parameters):
                lowest[violation_id].append(position)
            for violation_id, read in lowest.items():  # UNION ALL keeps no order between its parts
                crowded[violation_id].extend(sorted(read))
        for held in self._held.values():
            positions = crowded.get(held.violation_id)
            if positions is not None:
                positions.extend([None] * (held.count - len(positions)))
            held.positions = positions

    def link(self, pair: Pair, event_ids: Sequence[str], now: datetime) -> list[str]:
        """Link the events not yet linked, then trim (an event whose link a trim removed is linked again by a
        later match); the events linked."""
        held = self._held[pair]
        added = [event_id for event_id in event_ids if event_id not in held.linked]
        for event_id in added:
            held.position += 1
            held.linked[event_id] = held.position
            self._links.append({"violation_id": held.violation_id, "event_id": event_id, "position": held.position,
                                "added_at": now})
        if added and held.positions is not None:
            held.positions.extend(range(held.position - len(added) + 1, held.position + 1))
            if len(held.positions) > EVIDENCE_LIMIT:  # keep the first EVIDENCE_KEEP_FIRST and the latest
                held.positions = held.positions[:EVIDENCE_KEEP_FIRST] + held.positions[-_KEEP_LATEST:]
                after, before = held.positions[EVIDENCE_KEEP_FIRST - 1], held.positions[EVIDENCE_KEEP_FIRST]
                if after is None or before is None:  # too few positions were read: never trim blind
                    raise StoreError(f"violation {held.violation_id}: evidence trim reached a position not read")
                held.linked = {event_id: p for event_id, p in held.linked.items() if not after < p < before}
                held.trimmed = (after, before)
        return added

    def write(self) -> None:
        """Trims before links, since a trimmed event may be linked again; a link a later trim removed is left out."""
        trimmed = {held.violation_id: held.trimmed for held in self._held.values() if held.trimmed is not None}
        links = self._links
        if trimmed:
            trims = [{"violation": violation_id, "after": after, "before": before}
                     for violation_id, (after, before) in trimmed.items()]
            driver_statement(self._connection.dialect, _TRIM, list(trims[0])).executemany(self._connection, trims)
            links = [link for link in links if link["violation_id"] not in trimmed
                     or not trimmed[link["violation_id"]][0] < link["position"] < trimmed[link["violation_id"]][1]]
        if links:
            driver_statement(self._connection.dialect, _LINK, list(links[0])).write_rows(self._connection, links)
