"""Publishing events to the fleet's stream: one copy per key space that reads the event's kind, each with its own
`Nats-Msg-Id` (event id @ space), so a retried publish is dropped by JetStream's duplicate window."""

from __future__ import annotations

import time
from collections.abc import Sequence

import orjson

from gpuslo.engine.events import Event
from gpuslo.engine.fleet.bus import Bus, BusError
from gpuslo.engine.fleet.routing import SUBJECT_ROOT, RoutingTable
from gpuslo.engine.ingest_types import ACCEPTED, DUPLICATE

UNROUTED = f"{SUBJECT_ROOT}.unrouted"  # kinds no rule reads: kept on the stream, read by no worker


class Publisher:
    """Routes by the table the workers wrote (re-read every `refresh_s`) and publishes; thread-safe."""

    def __init__(self, bus: Bus, *, refresh_s: float = 10.0):
        self._bus = bus
        self._refresh_s = refresh_s
        self._table: RoutingTable | None = None
        self._read_at = -1e9

    def table(self) -> RoutingTable:
        if self._table is None or time.monotonic() - self._read_at > self._refresh_s:
            table = self._bus.routes()
            if table is None:
                raise BusError("no routing table on the bus yet: start a `gpuslo worker` first (it writes it)")
            self._table, self._read_at = table, time.monotonic()
        return self._table

    def publish(self, events: Sequence[Event]) -> list[str]:
        """Publish every event and wait for JetStream's acks; per event `accepted`, or `duplicate` when every
        copy was a duplicate. Raises BusError when any copy was not acknowledged (publish them all again)."""
        table = self.table()
        items: list[tuple[str, str, bytes]] = []
        owners: list[int] = []
        for index, event in enumerate(events):
            body = orjson.dumps(event.to_dict())
            partitions = table.route(event)
            for partition in partitions:
                items.append((partition.subject, f"{event.id}@{partition.space}", body))
                owners.append(index)
            if not partitions:
                items.append((UNROUTED, event.id, body))
                owners.append(index)
        duplicate = [True] * len(events)
        for index, was_duplicate in zip(owners, self._bus.publish(items), strict=True):
            duplicate[index] = duplicate[index] and was_duplicate
        return [DUPLICATE if d else ACCEPTED for d in duplicate]
