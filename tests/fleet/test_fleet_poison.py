"""Poison messages in fleet mode, on the real 3-node cluster and the real PostgreSQL: an event whose output the
database refuses, or whose evaluation raises, is stored with its error and the partition goes on with the rest of
the stream (0 lost, 0 doubled); while the database is down, nothing is quarantined and the batch is stored whole
once it is back."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import orjson
import pytest
from fleet_support import RULES, caught_up, wait_for
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpuslo.engine.config import Settings
from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.fleet.bus import Bus, Delivered, StreamSettings
from gpuslo.engine.fleet.partition import PartitionRunner, PartitionSettings, StoreAbandoned, store_batches
from gpuslo.engine.fleet.publish import Publisher
from gpuslo.engine.fleet.routing import RoutingTable, rulebooks_for
from gpuslo.engine.fleet.worker import Worker, WorkerSettings
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store import repository, violations
from gpuslo.engine.store.db import Database
from gpuslo.engine.violations import Match

START = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)


def _xid(event_id: str, host: str, second: int) -> dict[str, Any]:
    """Xid 79 (the GPU fell off the bus): every one is an occurrence of the host's one violation."""
    return {"id": event_id, "kind": "gpu_xid", "host": host, "gpu": 0, "source": "poison-test",
            "time": format_time(START + timedelta(seconds=second)), "attrs": {"xid": 79, "pci_bus": "0000:3b:00"}}


def _stream(hosts: int, rounds: int, poison: str, poison_round: int) -> list[dict[str, Any]]:
    """`rounds` Xids per host, and the poison host's one Xid in round `poison_round`."""
    events = [_xid(f"x-{r}-{h}", f"node-{h}", 10 * r + h) for r in range(rounds) for h in range(hosts)]
    events.insert(poison_round * hosts + 1, _xid(poison, "poison-host", 10 * poison_round))
    return events


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@contextmanager
def _running(bus: Bus, database: Database, metrics: Metrics) -> Iterator[Worker]:
    settings = Settings(database_url=database.url, rules_dir=RULES, rules_poll_seconds=0)
    worker = Worker(settings, bus, database, WorkerSettings(partitions=2, rebalance_s=0.5, fetch_timeout_s=0.2,
                                                            stream=StreamSettings(replicas=3), name="poison-test"),
                    metrics)
    worker.prepare()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), name="fleet-worker", daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(worker.runners) == len(worker.table.all_partitions()), 20,
                 "the worker owns every partition")  # 2 per key space
        yield worker
    finally:
        stop.set()
        thread.join(20)
        assert not thread.is_alive()


def _publish(bus: Bus, events: list[dict[str, Any]]) -> None:
    assert set(Publisher(bus).publish([parse_event(e) for e in events])) == {"accepted"}


def _check_stored(database: Database, good: list[dict[str, Any]], poison: str, error: str) -> None:
    """The good events: each stored, processed and without an error, each host's one violation counting each of
    its Xids once (0 lost, 0 doubled); the poison event: stored, processed, with `error`; no violation of it."""
    with database.engine.connect() as connection:
        events = {r[0]: (r[1], r[2]) for r in connection.execute(text("SELECT id, processed_at, error FROM events"))}
        violations = connection.execute(text(
            "SELECT v.group_key, v.occurrences, count(e.event_id) FROM violations v "
            "LEFT JOIN evidence e ON e.violation_id = v.id WHERE v.rule_id = 'xid-fallen-off-bus' "
            "GROUP BY v.id, v.group_key, v.occurrences")).all()
    assert set(events) == {e["id"] for e in good} | {poison}
    assert all(events[e["id"]][0] is not None and events[e["id"]][1] is None for e in good)
    processed_at, stored_error = events[poison]
    assert processed_at is not None and stored_error is not None and error in stored_error, stored_error
    per_host: dict[str, int] = {}
    for event in good:
        per_host[event["host"]] = per_host.get(event["host"], 0) + 1
    assert sorted((str(key), int(n)) for key, n, _evidence in violations) == sorted(
        (f"host={host},gpu=0", n) for host, n in per_host.items()), violations
    assert all(int(n) == int(evidence) for _key, n, evidence in violations)  # each occurrence's evidence row


def test_an_event_whose_output_the_database_refuses_is_quarantined_and_the_stream_goes_on(
        bus: Bus, fleet_database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    original = violations.record

    def record(session: Session, items: Any, **kwargs: Any) -> Any:
        if any(e.host == "poison-host" for m in items if isinstance(m, Match) for e in m.explanation.evidence):
            session.execute(text("SELECT 1 / 0"))  # a real PostgreSQL error: it aborts the transaction
        return original(session, items, **kwargs)

    monkeypatch.setattr(violations, "record", record)
    metrics = Metrics()
    first = _stream(hosts=6, rounds=2, poison="poison-store", poison_round=1)
    later = [_xid(f"y-{h}", f"node-{h}", 100 + h) for h in range(6)]  # after the poison, on the same partitions
    with _running(bus, fleet_database, metrics) as worker:
        _publish(bus, first)
        wait_for(lambda: caught_up(bus, fleet_database, worker.table), 60, "the partitions move past the poison")
        _publish(bus, later)
        wait_for(lambda: caught_up(bus, fleet_database, worker.table), 30, "the partitions go on after it")
    good = [e for e in first + later if e["id"] != "poison-store"]
    _check_stored(fleet_database, good, "poison-store",
                  "storing what it produced failed: ")
    with fleet_database.engine.connect() as connection:
        error = connection.execute(text("SELECT error FROM events WHERE id = 'poison-store'")).scalar_one()
    assert "division by zero" in error
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="store") == 1
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="evaluate") == 0
    assert _metric(metrics, "gpuslo_engine_errors_total", reason="store") >= 2  # two whole tries, then parts


def test_an_event_whose_evaluation_raises_is_stored_with_its_error_and_the_stream_goes_on(
        bus: Bus, fleet_database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    original = RuleEvaluator._fact

    def fact(self: RuleEvaluator, event: Event, unit: Any, timestamp: float) -> dict[str, Any]:
        if event.id == "poison-eval":
            raise ZeroDivisionError("injected: this event cannot be evaluated")
        return original(self, event, unit, timestamp)

    monkeypatch.setattr(RuleEvaluator, "_fact", fact)
    metrics = Metrics()
    events = _stream(hosts=5, rounds=3, poison="poison-eval", poison_round=1)
    with _running(bus, fleet_database, metrics) as worker:
        _publish(bus, events)
        wait_for(lambda: caught_up(bus, fleet_database, worker.table), 60, "the partitions store the stream")
    _check_stored(fleet_database, [e for e in events if e["id"] != "poison-eval"], "poison-eval",
                  "evaluating it failed: ZeroDivisionError: injected: this event cannot be evaluated")
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="evaluate") == 1
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="store") == 0
    assert _metric(metrics, "gpuslo_engine_errors_total", reason="store") == 0


def test_an_event_whose_row_the_database_refuses_is_dropped_alone_and_the_stream_goes_on(
        bus: Bus, fleet_database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    original = repository.store_events

    def store_events(session: Session, events: Any, **kwargs: Any) -> Any:
        if any(e.id == "poison-row" for e in events):
            session.execute(text("SELECT 1 / 0"))
        return original(session, events, **kwargs)

    monkeypatch.setattr(repository, "store_events", store_events)
    metrics = Metrics()
    events = _stream(hosts=4, rounds=2, poison="poison-row", poison_round=1)
    with _running(bus, fleet_database, metrics) as worker:
        _publish(bus, events)
        wait_for(lambda: caught_up(bus, fleet_database, worker.table), 60, "the partitions move past the poison")
    good = [e for e in events if e["id"] != "poison-row"]
    with fleet_database.engine.connect() as connection:
        stored = dict(connection.execute(text("SELECT id, error FROM events")).tuples().all())
        violations = dict(connection.execute(text(
            "SELECT group_key, occurrences FROM violations WHERE rule_id = 'xid-fallen-off-bus'")).tuples().all())
    assert stored == {e["id"]: None for e in good}  # no row for the refused one: nothing to keep its error in
    assert violations == {f"host=node-{h},gpu=0": 2 for h in range(4)}  # its match cites a missing row: refused
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="store") == 1


class _Proxy:
    """A TCP forwarder on a loopback port to PostgreSQL: the database as one worker sees it, down until up()."""

    def __init__(self, target: tuple[str, int]):
        self._target = target
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()  # nothing listens here until up(): connections are refused, as by a stopped server
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for s in self._sockets:
            s.close()


class _BehindProxy(NamedTuple):
    proxy: _Proxy
    through: Database
    runner: PartitionRunner
    metrics: Metrics
    events: list[dict[str, Any]]
    pending: Any


def _evaluated_behind_a_proxy(bus: Bus, database: Database, owner: str, prefix: str, count: int) -> _BehindProxy:
    """A host partition's runner that has evaluated `count` Xid events (not stored), and `database` seen through
    a loopback proxy that stays down until `proxy.up()`."""
    url = make_url(database.url)
    proxy = _Proxy((url.host or "127.0.0.1", url.port or 5432))
    through = Database(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False))
    rulebooks = load_directory(RULES)[0]
    partition = next(p for p in RoutingTable.of(rulebooks, 1).all_partitions() if p.space == "host")
    metrics = Metrics()
    runner = PartitionRunner(partition, rulebooks_for(rulebooks, partition.space), bus=bus, database=database,
                             owner=owner, notify=lambda *_: None, metrics=metrics, settings=PartitionSettings())
    events = [_xid(f"{prefix}-{i}", f"node-{i % 3}", i) for i in range(count)]
    now = datetime.now(UTC)
    pending = runner.evaluate([Delivered(i + 1, now, orjson.dumps(e)) for i, e in enumerate(events)])
    assert pending is not None
    return _BehindProxy(proxy, through, runner, metrics, events, pending)


def test_while_the_database_is_down_nothing_is_quarantined_and_the_batch_is_stored_whole_after(
        bus: Bus, fleet_database: Database) -> None:
    proxy, through, runner, metrics, events, pending = _evaluated_behind_a_proxy(bus, fleet_database, "down-test",
                                                                                  "d", 9)
    assert len(pending.results[0].matches) == 9
    lost: list[PartitionRunner] = []
    storing = threading.Thread(target=lambda: lost.extend(store_batches(through, [pending], "down-test",
                                                                        lambda *_: None, metrics)))
    try:
        storing.start()
        # Past the two whole tries: from then on it asks the database whether it answers, before each try.
        wait_for(lambda: _metric(metrics, "gpuslo_engine_errors_total", reason="store") >= 4, 30,
                 "store_batches keeps retrying while the database is down")
        assert storing.is_alive()
        with fleet_database.engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM events")).scalar_one() == 0
        proxy.up()
        storing.join(30)
        assert not storing.is_alive() and lost == []
    finally:
        proxy.close()
        through.dispose()
    assert runner.offset == pending.offset
    _check_stored_all(fleet_database, events)
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="store") == 0
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="evaluate") == 0


def test_a_worker_told_to_stop_while_the_database_is_down_abandons_the_batch_and_stores_nothing(
        bus: Bus, fleet_database: Database) -> None:
    # the proxy is never brought up: the database stays away
    proxy, through, runner, metrics, _, pending = _evaluated_behind_a_proxy(bus, fleet_database, "stop-test", "s", 6)
    stop = threading.Event()
    outcome: list[BaseException | list[PartitionRunner]] = []

    def storing() -> None:
        try:
            outcome.append(store_batches(through, [pending], "stop-test", lambda *_: None, metrics, stop=stop))
        except BaseException as exc:  # noqa: BLE001  # what it raised is the test's subject
            outcome.append(exc)

    thread = threading.Thread(target=storing, daemon=True)
    try:
        thread.start()
        wait_for(lambda: _metric(metrics, "gpuslo_engine_errors_total", reason="store") >= 3, 30,
                 "store_batches retrying while the database is down")
        stop.set()
        thread.join(30)  # a bound on the wait, not a timing assertion: it must end, however long it took
        assert not thread.is_alive(), "store_batches kept retrying after the stop signal"
    finally:
        stop.set()
        proxy.close()
        through.dispose()
    assert len(outcome) == 1 and isinstance(outcome[0], StoreAbandoned), outcome
    assert runner.offset.seq == 0 and runner.offset.version == 0  # the offset stays: the next owner reads it again
    with fleet_database.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM events")).scalar_one() == 0
        assert connection.execute(text("SELECT count(*) FROM fleet_partitions")).scalar_one() == 0
    assert _metric(metrics, "gpuslo_events_quarantined_total", stage="store") == 0


def _check_stored_all(database: Database, events: list[dict[str, Any]]) -> None:
    with database.engine.connect() as connection:
        rows = connection.execute(text("SELECT id, processed_at, error FROM events")).all()
        violations = dict(connection.execute(text(
            "SELECT group_key, occurrences FROM violations WHERE rule_id = 'xid-fallen-off-bus'")).tuples().all())
        seq = connection.execute(text("SELECT seq FROM fleet_partitions")).scalar_one()
    assert sorted(r[0] for r in rows) == sorted(e["id"] for e in events)
    assert all(r[1] is not None and r[2] is None for r in rows)
    assert violations == {f"host=node-{h},gpu=0": 3 for h in range(3)}
    assert seq == len(events)



def test_stream_messages_that_are_not_events_are_counted_and_skipped_and_the_stream_goes_on(
        bus: Bus, fleet_database: Database) -> None:
    """A bad publisher's messages on a partition's subject: bytes that are not JSON, a bare number, and a batch
    whose first object is not an event. Each is logged and counted (`bus_event`); the good event inside the
    batch and every later event are stored, each host's violation counting its Xids once."""
    metrics = Metrics()
    good_inside = _xid("inside-1", "poison-host", 5)
    events = _stream(hosts=4, rounds=2, poison="after-1", poison_round=1)
    with _running(bus, fleet_database, metrics) as worker:
        (partition,) = [p for p in worker.table.route(parse_event(good_inside)) if p.space == "host"]
        not_an_event = orjson.dumps({"id": "no-kind", "time": "yesterday"})
        bad_batch = b"[" + not_an_event + b"," + orjson.dumps(good_inside) + b"]"
        duplicates = bus.publish([(partition.subject, "bad-1", b"{not json"), (partition.subject, "bad-2", b"42"),
                                  (partition.subject, "bad-3", bad_batch)])
        assert duplicates == [False, False, False]  # each acknowledged as new
        _publish(bus, events)
        wait_for(lambda: caught_up(bus, fleet_database, worker.table), 60, "the partitions store the stream")
    with fleet_database.engine.connect() as connection:
        occurrences = dict(connection.execute(text(
            "SELECT group_key, occurrences FROM violations WHERE rule_id = 'xid-fallen-off-bus'")).tuples().all())
    expected = {f"host=node-{h},gpu=0": 2 for h in range(4)} | {"host=poison-host,gpu=0": 2}
    assert {str(k): int(n) for k, n in occurrences.items()} == expected
    assert _metric(metrics, "gpuslo_engine_errors_total", reason="bus_event") == 3
