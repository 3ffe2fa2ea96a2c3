"""Publishing events to the fleet's stream: one copy per key space that reads the event's kind. The copies of one
publish bound for one subject travel as one message (a JSON array of events, in order; split to stay under
`max_message_bytes`), with a `Nats-Msg-Id` derived from the subject and the ids it holds: the same events
published again in the same batch (a client retrying a request whose ack it lost) are dropped by JetStream's
duplicate window; events re-published in another batch are skipped by the partition's memory of ids
(partition.py)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import orjson

from gpuslo.engine.events import Event
from gpuslo.engine.fleet.bus import Bus, BusError
from gpuslo.engine.fleet.routing import SUBJECT_ROOT, RoutingTable
from gpuslo.engine.ingest_types import ACCEPTED, DUPLICATE

UNROUTED = f"{SUBJECT_ROOT}.unrouted"  # kinds no rule reads: kept on the stream, read by no worker
MAX_MESSAGE_BYTES = 512 * 1024  # below NATS's default max_payload (1 MiB), with room for headers


class Publisher:
    """Routes by the table the workers wrote (re-read every `refresh_s`) and publishes; thread-safe."""

    def __init__(self, bus: Bus, *, refresh_s: float = 10.0, max_message_bytes: int = MAX_MESSAGE_BYTES):
        self._bus = bus
        self._refresh_s = refresh_s
        self._max_bytes = max_message_bytes
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
        message holding a copy of it was a duplicate. Raises BusError when any message was not acknowledged
        (publish them all again)."""
        table = self.table()
        by_subject: dict[str, list[int]] = {}
        bodies = [orjson.dumps(event.to_dict()) for event in events]
        for index, event in enumerate(events):
            partitions = table.route(event)
            for partition in partitions:
                by_subject.setdefault(partition.subject, []).append(index)
            if not partitions:
                by_subject.setdefault(UNROUTED, []).append(index)
        items: list[tuple[str, str, bytes]] = []
        owners: list[list[int]] = []
        for subject, indexes in by_subject.items():
            for chunk in self._chunks(indexes, bodies):
                items.append((subject, message_id(subject, [events[i].id for i in chunk]),
                              b"[" + b",".join(bodies[i] for i in chunk) + b"]"))
                owners.append(chunk)
        duplicate = [True] * len(events)
        for chunk, was_duplicate in zip(owners, self._bus.publish(items), strict=True):
            if not was_duplicate:
                for index in chunk:
                    duplicate[index] = False
        return [DUPLICATE if d else ACCEPTED for d in duplicate]

    def _chunks(self, indexes: Sequence[int], bodies: Sequence[bytes]) -> list[list[int]]:
        """Consecutive runs of events whose bodies fit in one message (an event alone always makes one)."""
        chunks: list[list[int]] = [[]]
        size = 1  # "[" and "]" and the commas between n bodies: 1 + n
        for index in indexes:
            length = len(bodies[index]) + 1
            if chunks[-1] and size + length > self._max_bytes:
                chunks.append([])
                size = 1
            chunks[-1].append(index)
            size += length
        return chunks


def decode(data: bytes) -> list[object]:
    """The event objects a stream message holds: a JSON array of them, or one (as published before batches).
    Raises orjson.JSONDecodeError when the message is not JSON."""
    body = orjson.loads(data)
    return body if isinstance(body, list) else [body]


def message_id(subject: str, ids: Sequence[str]) -> str:
    """The `Nats-Msg-Id` of a message: the subject and a digest of the event ids it holds, in order (the same
    events in the same message get the same id in every process)."""
    digest = hashlib.sha256(orjson.dumps(list(ids))).hexdigest()[:32]
    return f"{subject}:{len(ids)}:{digest}"
