"""Fleet mode against its failures, on a real 3-node NATS JetStream cluster (R3 stream) and the real PostgreSQL:
a worker killed with SIGKILL in the middle of a batch's transaction, the stream's leader node killed, then every
worker and every NATS node stopped and started again. What the fleet stored must equal what the embedded single
process stores for the same events: every violation with its occurrences, status and evidence, and every
notification (0 lost, 0 doubled)."""

from __future__ import annotations

import time
from pathlib import Path

from fleet_cluster_support import NatsCluster, wait_jetstream
from fleet_support import (
    RULES,
    WorkerProcess,
    caught_up,
    fleet_events,
    kill_mid_batch,
    owned_partitions,
    publish,
    reference_run,
    shared,
    stored,
    wait_for,
)
from sqlalchemy import text

from gpuslo.engine.fleet.bus import Bus
from gpuslo.engine.fleet.publish import Publisher
from gpuslo.engine.fleet.routing import RoutingTable
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.store.db import Database

PARTITIONS = 4
REBALANCE_S = 5.0  # the stated bound: two rebalance intervals (1 s each), a replay, and a loaded machine's slack


def test_join_kill_worker_mid_batch_kill_nats_leader_restart_everything(
        cluster: NatsCluster, bus: Bus, fleet_database: Database, tmp_path: Path) -> None:
    events = fleet_events()
    first, second, third = events[: len(events) * 2 // 5], events[len(events) * 2 // 5: len(events) * 7 // 10], \
        events[len(events) * 7 // 10:]
    reference = reference_run(events, tmp_path)
    table = RoutingTable.of(load_directory(RULES)[0], PARTITIONS)
    workers = [WorkerProcess(name, fleet_database, cluster.urls, tmp_path, partitions=PARTITIONS)
               for name in ("w1", "w2")]
    total = len(table.all_partitions())
    publisher = Publisher(bus, refresh_s=0.5)
    workers[0].start()
    try:
        wait_for(lambda: owned_partitions(fleet_database) == {"w1": total}, 60, "w1 owning every partition")
        # 0. A second worker joins: half the partitions move to it.
        workers[1].start()
        wait_for(lambda: _members(fleet_database) == 2, 60, "w2 joining")
        joined = wait_for(lambda: shared(fleet_database, {"w1", "w2"}, total), 30,
                          "the partitions shared")
        # 1. A worker dies with a batch half-written; its partitions move to the other one.
        assert publish(publisher, first) == (0, 0)
        kill_mid_batch(workers[0], fleet_database)
        killed_at = time.monotonic()
        # Agents retrying requests whose acks they lost: the same batches again, dropped by JetStream.
        assert publish(publisher, first[:500])[0] == 500
        # The same events in other batches (a spool that grew meanwhile): kept on the stream, and each
        # partition skips the ids it has evaluated (compared below: nothing doubled).
        assert publish(publisher, first[100:400], 120)[0] == 0
        wait_for(lambda: owned_partitions(fleet_database) == {"w2": total}, 30, "w2 taking w1's partitions")
        taken_over = time.monotonic() - killed_at
        # 2. The node leading the stream dies while events keep coming.
        leader = bus.stream_leader()
        cluster.kill(next(node for node in cluster.nodes if node.name == leader))
        publish(publisher, second)  # retried through the election: copies that did get in come back duplicate
        workers[0].start()
        cluster.start(next(node for node in cluster.nodes if node.process is None))
        wait_for(lambda: caught_up(bus, fleet_database, table), 90, "the fleet catching up after the kills")
        # 3. Everything stops at once and comes back.
        for worker in workers:
            worker.kill()
        for node in cluster.nodes:
            cluster.kill(node)
        cluster.start()
        for worker in workers:
            worker.start()
        wait_jetstream(cluster.urls)  # the stream's election after the restart, without 10 s request timeouts
        publish(publisher, third)
        wait_for(lambda: caught_up(bus, fleet_database, table), 90, "the fleet catching up after the restart")
    finally:
        for worker in workers:
            worker.stop()
    print(f"rebalance: a joining worker got its share in {joined:.2f} s, a killed worker's share moved in "
          f"{taken_over:.2f} s")
    assert joined < REBALANCE_S and taken_over < REBALANCE_S
    fleet = stored(fleet_database)
    logs = "\n".join(w.log_text() for w in workers)
    assert "Traceback" not in logs, logs[-4000:]
    lost = set(reference.violations) - set(fleet.violations)
    extra = set(fleet.violations) - set(reference.violations)
    assert not lost and not extra, (sorted(lost)[:5], sorted(extra)[:5])
    differing = {k: (reference.violations[k], fleet.violations[k]) for k in reference.violations
                 if reference.violations[k] != fleet.violations[k]}
    assert not differing, list(differing.items())[:3]
    assert fleet.notifications == reference.notifications
    assert len(reference.violations) >= 50 and reference.occurrences >= 300
    assert {rule for rule, _key, _first in reference.violations} >= {
        "cuda-oom", "oom-storm", "cuda-graph-after-oom", "fragmentation-high", "collective-hang",
        "nccl-watchdog-timeout", "probe-silent"}



def _members(database: Database) -> int:
    from gpuslo.engine.fleet.ownership import MEMBER_CLASS

    with database.engine.connect() as connection:
        return int(connection.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :cls "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"cls": MEMBER_CLASS}).scalar() or 0)
