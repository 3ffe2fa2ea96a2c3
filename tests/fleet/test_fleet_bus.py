"""The bus side of fleet mode on the real 3-node cluster: the publisher's routing and duplicate window,
`serve --bus` ingest (validate, publish, answer after the ack; no engine; periodic jobs only in the leader) and
`agent --bus` (an event leaves the spool only once JetStream acknowledged it)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from fleet_support import RULES, wait_for

from gpuslo.cli.agent_bus import BusShipper
from gpuslo.cli.serve import FleetReplica
from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.events import parse_event
from gpuslo.engine.fleet.bus import Bus, BusError, Delivered
from gpuslo.engine.fleet.ownership import Ownership
from gpuslo.engine.fleet.partition import PartitionRunner, PartitionSettings
from gpuslo.engine.fleet.publish import UNROUTED, Publisher, decode
from gpuslo.engine.fleet.routing import RoutingTable, rulebooks_for
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.store.db import Database
from gpuslo.probes.shipper import ShipperConfig
from gpuslo.probes.spool import Spool
from gpuslo.web import create_app

OOM = {"kind": "cuda_oom", "host": "node-1", "gpu": 0, "time": "2026-12-01T10:00:00Z",
       "attrs": {"api": "cudaMalloc", "requested_bytes": 2147483648, "free_bytes": 1073741824}}
TIMEOUT = {"kind": "nccl_timeout", "host": "node-2", "job": "job-9", "rank": 3, "time": "2026-12-01T10:00:01Z",
           "attrs": {"op": "ALLREDUCE", "seq": 7, "timeout_ms": 600000}}
TABLE = RoutingTable.of(load_directory(RULES)[0], 4)


def _messages(bus: Bus, subject: str) -> list[list[dict[str, Any]]]:
    """Each message on the subject, as the list of events it holds."""
    reader = bus.reader(subject)
    try:
        return [[dict(e) for e in decode(d.data)] for d in reader.fetch(100, 1.0)]  # type: ignore[call-overload]
    finally:
        reader.close()


def _read_all(bus: Bus, subject: str) -> list[dict[str, Any]]:
    return [event for message in _messages(bus, subject) for event in message]


def test_publisher_routes_each_copy_and_drops_a_retry(bus: Bus) -> None:
    with pytest.raises(BusError, match="start a `gpuslo worker` first"):
        Publisher(bus).publish([parse_event({**OOM, "id": "e0"})])
    bus.put_routes(TABLE)
    publisher = Publisher(bus)
    events = [parse_event({**OOM, "id": "e1"}), parse_event({**TIMEOUT, "id": "e2"})]
    assert publisher.publish(events) == ["accepted", "accepted"]
    assert publisher.publish(events) == ["duplicate", "duplicate"]  # JetStream's duplicate window
    oom_host = next(r for r in TABLE.route(events[0]) if r.space == "host")  # (rootcause.yaml also joins on job)
    timeout_host, timeout_job = TABLE.route(events[1])
    assert (timeout_host.space, timeout_job.space) == ("host", "job")
    on_job = _read_all(bus, timeout_job.subject)
    assert [e["id"] for e in on_job] == ["e2"] and parse_event(on_job[0]) == events[1]
    assert "e2" in [e["id"] for e in _read_all(bus, timeout_host.subject)]
    assert "e1" in [e["id"] for e in _read_all(bus, oom_host.subject)]


def test_a_publish_travels_as_one_message_per_subject_and_only_the_same_batch_again_is_a_duplicate(
        bus: Bus) -> None:
    bus.put_routes(TABLE)
    publisher = Publisher(bus)
    events = [parse_event({**OOM, "id": f"b{i}", "gpu": i % 2}) for i in range(6)]  # one host: one host subject
    subject = next(r for r in TABLE.route(events[0]) if r.space == "host").subject
    assert publisher.publish(events) == ["accepted"] * 6
    assert [[e["id"] for e in m] for m in _messages(bus, subject)] == [[f"b{i}" for i in range(6)]]
    assert publisher.publish(events) == ["duplicate"] * 6  # a client retrying its request: dropped by JetStream
    other = [*events[2:5], parse_event({**OOM, "id": "b6"})]  # some of them again, in another batch: kept (the
    assert publisher.publish(other) == ["accepted"] * 4     # partition's memory of ids skips the three again)
    assert [[e["id"] for e in m] for m in _messages(bus, subject)] == [[f"b{i}" for i in range(6)],
                                                                       ["b2", "b3", "b4", "b6"]]
    # A batch too big for one message is split, in order, each part its own message id.
    size = len(orjson.dumps(events[0].to_dict()))
    small = Publisher(bus, max_message_bytes=2 * size + 3)
    many = [parse_event({**OOM, "id": f"c{i}"}) for i in range(5)]
    assert small.publish(many) == ["accepted"] * 5
    parts = [[e["id"] for e in m] for m in _messages(bus, subject)][2:]
    assert parts == [["c0", "c1"], ["c2", "c3"], ["c4"]]
    assert small.publish(many) == ["duplicate"] * 5


def test_a_partition_evaluates_an_event_published_twice_in_different_batches_once(bus: Bus) -> None:
    rulebooks = load_directory(RULES)[0]
    partition = next(p for p in RoutingTable.of(rulebooks, 1).all_partitions() if p.space == "host")
    runner = PartitionRunner(partition, rulebooks_for(rulebooks, "host"), bus=bus, database=Database("sqlite://"),
                             owner="t", notify=lambda *_: None, metrics=Metrics(), settings=PartitionSettings())
    xid = {"kind": "gpu_xid", "host": "node-1", "gpu": 0, "attrs": {"xid": 79, "pci_bus": "0000:3b:00"}}
    batch = [{**xid, "id": f"x{i}", "time": f"2026-12-01T10:00:0{i}Z"} for i in range(4)]
    now = datetime.now(UTC)
    first = runner.evaluate([Delivered(1, now, orjson.dumps(batch[:3]))])
    again = runner.evaluate([Delivered(2, now, orjson.dumps(batch[1:]))])  # x1, x2 again, and x3
    assert first is not None and again is not None
    assert (first.evaluated, again.evaluated) == (3, 1)
    assert [len(p.results[0].matches) for p in (first, again)] == [3, 1]
    assert again.offset.seq == 2  # the offset moves past the whole message


def test_an_event_no_rule_reads_is_kept_on_the_stream_for_no_worker(bus: Bus) -> None:
    memory_only = RoutingTable.of([rb for rb in load_directory(RULES)[0] if rb.name == "memory"], 4)
    assert memory_only.route(parse_event({**TIMEOUT, "id": "x"})) == ()
    bus.put_routes(memory_only)
    assert Publisher(bus).publish([parse_event({**TIMEOUT, "id": "u1"})]) == ["accepted"]
    assert [e["id"] for e in _read_all(bus, UNROUTED)] == ["u1"]


def test_serve_bus_publishes_after_validating_and_runs_no_engine(bus: Bus, fleet_database: Database,
                                                                  tmp_path: Path) -> None:
    bus.put_routes(TABLE)
    settings = Settings(database_url=fleet_database.url, rules_dir=RULES, auth_required=False,
                        rules_poll_seconds=0)
    replica = FleetReplica(settings, ",".join(bus_urls(bus)))
    rival = Ownership(fleet_database, "other-replica", member=False)
    rival.join()
    assert rival.lead()  # another replica leads: this one's periodic jobs must not run
    core = Gpuslo.open(settings, publish=replica.publish, leader=replica.lead)
    try:
        client = create_app(settings, core=core).test_client()
        answer = client.post("/api/v1/events", json=[{**OOM, "id": "s1"}, {**OOM, "id": "bad", "gpu": -1}])
        statuses = [r["status"] for r in answer.get_json()["results"]]
        assert statuses == ["accepted", "rejected"]
        again = client.post("/api/v1/events", json=[{**OOM, "id": "s1"}])
        assert [r["status"] for r in again.get_json()["results"]] == ["duplicate"]
        assert [e["id"] for e in _read_all(bus, TABLE.route(parse_event({**OOM, "id": "s1"}))[0].subject)] == ["s1"]
        assert not core.runtime._thread.is_alive()  # fleet mode: the workers evaluate, not the web replica
        with fleet_database.session(readonly=True) as session:
            from sqlalchemy import text
            assert session.execute(text("SELECT count(*) FROM events")).scalar() == 0  # workers store them
        lifecycle = core.scheduler.get_job("lifecycle")
        assert lifecycle is not None and lifecycle.func() is None  # not the leader: skipped
        rival.leave()
        wait_for(lambda: lifecycle.func() == [], 5, "this replica leading once the rival is gone")
    finally:
        core.close()
        replica.close()
        rival.leave()


def test_agent_bus_keeps_events_in_the_spool_until_jetstream_acknowledged(bus: Bus, tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool.db")
    spool.append([parse_event({**OOM, "id": f"a{i}"}) for i in range(5)])
    shipper = BusShipper(spool, ShipperConfig(server="", host="node-1", backoff_base_s=0.0), Publisher(bus))
    result = shipper.ship_once()  # no routing table yet: the bus refuses, nothing leaves the spool
    assert result.error and "no routing table" in result.error and len(spool) >= 5
    bus.put_routes(TABLE)
    wait_for(lambda: shipper.drain() >= 5 or len(spool) == 0, 10, "the shipper draining the spool")
    assert len(spool) == 0
    subject = TABLE.route(parse_event({**OOM, "id": "a0"}))[0].subject
    assert {f"a{i}" for i in range(5)} <= {e["id"] for e in _read_all(bus, subject)}
    shipper.close()
    spool.close()


def bus_urls(bus: Bus) -> list[str]:
    return bus.servers
