"""The one module that speaks NATS: a synchronous face over nats-py's asyncio client, run on its own loop thread.

The stream GPUSLO_EVENTS holds every routed copy of every event (subjects gpuslo.ev.<space>.<partition>), three
replicas, file storage, a duplicate window in which a re-published id is dropped; the key-value bucket
GPUSLO_FLEET holds the routing table the workers wrote.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js import api
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError

from gpuslo.engine.errors import GpusloError
from gpuslo.engine.fleet.routing import SUBJECT_ROOT, RoutingTable

log = logging.getLogger(__name__)
STREAM = "GPUSLO_EVENTS"
BUCKET = "GPUSLO_FLEET"
ROUTES_KEY = "routes"
LOADS_KEY = "loads"
T = TypeVar("T")


class BusError(GpusloError):
    """The bus could not be reached or refused an operation."""


@dataclass(frozen=True)
class StreamSettings:
    """How the stream is created when it is missing (an existing stream is left as it is)."""

    replicas: int = 3
    duplicate_window_s: float = 300.0
    max_age_s: float = 7 * 86400.0


@dataclass(frozen=True)
class Delivered:
    """One message read back: its stream sequence, when the stream stored it, and the event's JSON."""

    seq: int
    stored_at: datetime
    data: bytes


class Bus:
    """A connection to a NATS cluster (any of `servers`), reconnecting forever while it is open."""

    def __init__(self, servers: Sequence[str], *, name: str = "gpuslo", timeout_s: float = 10.0):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gpuslo-bus", daemon=True)
        self._thread.start()
        self._timeout = timeout_s
        self.servers = list(servers)
        self.connection_generation = 0  # counts disconnects: a Reader's consumer from before one is dropped
        try:
            self._nc = self._run(nats.connect(list(servers), name=name, max_reconnect_attempts=-1,
                                              reconnect_time_wait=0.5, connect_timeout=2,
                                              allow_reconnect=True, error_cb=_log_error,
                                              disconnected_cb=self._disconnected))
        except Exception as exc:
            self.close()
            raise BusError(f"connecting to NATS at {', '.join(servers)}: {exc}") from exc
        self._js = self._nc.jetstream(timeout=timeout_s)

    async def _disconnected(self) -> None:
        self.connection_generation += 1

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout=(timeout or self._timeout) + 5.0)

    def close(self) -> None:
        if getattr(self, "_nc", None) is not None:
            try:
                self._run(self._nc.close(), 5.0)
            except Exception:  # noqa: BLE001 - closing a connection that is already gone
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()

    # ---- setup ----

    def ensure_stream(self, settings: StreamSettings) -> None:
        """Create the stream and the bucket when missing; retried while the cluster elects its leaders."""
        async def ensure() -> None:
            try:
                await self._js.stream_info(STREAM)
            except NotFoundError:
                await self._js.add_stream(api.StreamConfig(
                    name=STREAM, subjects=[f"{SUBJECT_ROOT}.>"], storage=api.StorageType.FILE,
                    num_replicas=settings.replicas, duplicate_window=settings.duplicate_window_s,
                    max_age=settings.max_age_s, retention=api.RetentionPolicy.LIMITS))
            try:
                await self._js.key_value(BUCKET)
            except BucketNotFoundError:
                await self._js.create_key_value(api.KeyValueConfig(bucket=BUCKET, replicas=settings.replicas,
                                                                   history=1))
        self._retry(ensure, "creating the stream")

    def _retry(self, make: Any, what: str, attempts: int = 20) -> Any:
        last: Exception | None = None
        for _ in range(attempts):
            try:
                return self._run(make())
            except Exception as exc:  # noqa: BLE001 - the cluster answers "no leader" while it elects one
                last = exc
                self._run(asyncio.sleep(0.5))
        raise BusError(f"{what} on NATS: {last!r}")

    def drop_stream(self) -> None:
        """Delete the stream and the bucket with everything in them (tests start each case from nothing)."""
        async def drop() -> None:
            for name in (STREAM, f"KV_{BUCKET}"):
                try:
                    await self._js.delete_stream(name)
                except NotFoundError:
                    pass
        self._retry(drop, "deleting the stream")

    def stream_leader(self) -> str:
        """The name of the server leading the stream's replicas now."""
        async def leader() -> str:
            info = await self._js.stream_info(STREAM)
            return str(info.cluster.leader) if info.cluster else ""
        return str(self._retry(leader, "reading the stream's leader"))

    def subject_counts(self) -> dict[str, int]:
        """The messages the stream holds per subject (the partitions' recent load; subjects without any absent)."""
        async def counts() -> dict[str, int]:
            info = await self._js.stream_info(STREAM, subjects_filter=f"{SUBJECT_ROOT}.>")
            return {str(k): int(v) for k, v in (info.state.subjects or {}).items()}
        return dict(self._retry(counts, "reading the stream's subject counts", attempts=2))

    def _kv_put(self, key: str, data: bytes, what: str, attempts: int = 20) -> None:
        async def put() -> None:
            kv = await self._js.key_value(BUCKET)
            await kv.put(key, data)
        self._retry(put, what, attempts=attempts)

    def _kv_get(self, key: str, what: str, attempts: int) -> bytes | None:
        """The value of a key of the fleet's KV bucket, or None when it was never written."""
        async def get() -> bytes | None:
            kv = await self._js.key_value(BUCKET)
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                return None
            return entry.value
        return self._retry(get, what, attempts=attempts)  # type: ignore[no-any-return]

    def put_loads(self, data: bytes) -> None:
        """The partitions' loads the fleet shares its partitions by (ownership.assign), written by one worker."""
        self._kv_put(LOADS_KEY, data, "writing the partitions' loads", attempts=2)

    def loads(self) -> bytes | None:
        return self._kv_get(LOADS_KEY, "reading the partitions' loads", attempts=2)

    def put_routes(self, table: RoutingTable) -> None:
        self._kv_put(ROUTES_KEY, table.to_json(), "writing the routing table")

    def routes(self) -> RoutingTable | None:
        """The routing table the workers wrote, or None before any worker started."""
        data = self._kv_get(ROUTES_KEY, "reading the routing table", attempts=4)
        return None if data is None else RoutingTable.from_json(data)

    # ---- publishing ----

    def publish(self, items: Sequence[tuple[str, str, bytes]]) -> list[bool]:
        """Publish (subject, message id, body) items concurrently and wait for every ack; True where JetStream
        answered "duplicate" (the id was published within the duplicate window). Raises BusError when any
        item was not acknowledged: the caller keeps them all and publishes again (ids make that idempotent)."""
        async def publish_all() -> list[bool]:
            acks = await asyncio.gather(*(self._js.publish(subject, body, headers={"Nats-Msg-Id": msg_id},
                                                           stream=STREAM)
                                          for subject, msg_id, body in items), return_exceptions=True)
            failed = [a for a in acks if isinstance(a, BaseException)]
            if failed:
                raise BusError(f"{len(failed)} of {len(items)} events were not acknowledged: {failed[0]!r}")
            return [bool(a.duplicate) for a in acks]  # type: ignore[union-attr]
        try:
            return self._run(publish_all())
        except BusError:
            raise
        except Exception as exc:
            raise BusError(f"publishing to {STREAM}: {exc!r}") from exc

    def last_sequence(self, subject: str) -> int:
        """The stream sequence of the newest message on a subject (0 when it has none)."""
        async def last() -> int:
            try:
                message = await self._js.get_last_msg(STREAM, subject)
            except NotFoundError:
                return 0
            return int(message.seq or 0)
        return int(self._retry(last, f"reading the last message of {subject}", attempts=10))

    # ---- reading ----

    def take_all(self, readers: Sequence[Reader], limit: int, timeout_s: float) -> list[list[Delivered]]:
        """One fetch on every reader at once (a worker owns many partitions; one wait covers them all)."""
        async def take() -> list[list[Delivered]]:
            return list(await asyncio.gather(*(reader.take(limit, timeout_s) for reader in readers)))
        return self._run(take(), timeout_s + 10.0)

    def reader(self, subject: str, *, after: int = 0, since: datetime | None = None) -> Reader:
        """An ephemeral pull consumer of one subject, starting after stream sequence `after`, or at the first
        message stored at or after `since` (a replay)."""
        return Reader(self, subject, after, since)


class Reader:
    """Reads one subject in stream order; recreates its consumer after the sequence it last returned when the
    consumer was lost (a NATS node died, the connection was cut)."""

    def __init__(self, bus: Bus, subject: str, after: int, since: datetime | None):
        self._bus = bus
        self._subject = subject
        self._last = after
        self._since = since
        self._sub: Any = None
        self._generation = bus.connection_generation

    async def _subscribe(self) -> Any:
        if self._since is not None and self._last == 0:
            policy: dict[str, Any] = {"deliver_policy": api.DeliverPolicy.BY_START_TIME,
                                      "opt_start_time": self._since.isoformat()}
        elif self._last:
            policy = {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": self._last + 1}
        else:
            policy = {"deliver_policy": api.DeliverPolicy.ALL}
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, inactive_threshold=60.0,
                                    filter_subject=self._subject, mem_storage=True, **policy)
        return await self._bus._js.pull_subscribe(self._subject, stream=STREAM, config=config)

    async def take(self, limit: int, timeout_s: float) -> list[Delivered]:
        """Up to `limit` messages after the last one returned; [] when none came within `timeout_s`, or when the
        consumer failed (it is dropped and the next call makes a new one after the last sequence returned)."""
        if self._sub is not None and self._generation != self._bus.connection_generation:
            # The connection was cut (a lost node, or the server's slow-consumer limit when a fetch brought more
            # than it lets a client fall behind): with acks off, the consumer counts what was in flight as
            # delivered, so reading on from it would skip those messages, or wait forever after the last ones.
            log.warning("reading %s: the connection was cut; making a new consumer after %d", self._subject,
                        self._last)
            self._sub = None
        try:
            if self._sub is None:
                self._generation = self._bus.connection_generation
                self._sub = await self._subscribe()
            messages = await self._sub.fetch(limit, timeout=timeout_s)
        except (TimeoutError, NatsTimeout):
            return []
        except Exception as exc:  # noqa: BLE001 - a lost node or connection: start over from our own sequence
            log.warning("reading %s after %d failed (%r); making a new consumer", self._subject, self._last, exc)
            self._sub = None
            return []
        out = []
        for message in messages:
            meta = message.metadata
            seq = int(meta.sequence.stream)
            if seq <= self._last:
                continue  # a recreated consumer may hand back what was already returned
            out.append(Delivered(seq, meta.timestamp, message.data))
            self._last = seq
        return out

    def fetch(self, limit: int, timeout_s: float) -> list[Delivered]:
        return self._bus.take_all([self], limit, timeout_s)[0]

    def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                self._bus._run(sub.unsubscribe(), 5.0)
            except Exception:  # noqa: BLE001 - the consumer may already be gone with its node
                pass


async def _log_error(exc: Exception) -> None:
    """nats-py's default prints a traceback for every failed reconnect to a node that is down."""
    log.warning("NATS: %r", exc)
