"""Fleet workers count the SLIs: token requests and NCCL progress reports published to a real 3-node NATS
JetStream cluster and stored by two `gpuslo worker` processes on the real PostgreSQL must leave the same SLI
minute buckets as a brute-force count of the shipped indicators over the events."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fleet_cluster_support import NatsCluster
from fleet_support import RULES, WorkerProcess, caught_up, owned_partitions, publish, wait_for
from sqlalchemy import text

from gpuslo.engine.events import format_time, parse_event
from gpuslo.engine.explain import group_key
from gpuslo.engine.fleet.bus import Bus
from gpuslo.engine.fleet.publish import Publisher
from gpuslo.engine.fleet.routing import RoutingTable
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.slo.build import compile_sli
from gpuslo.engine.store.db import Database

PARTITIONS = 4


def _events() -> list[dict[str, Any]]:
    """Ten minutes of token requests on four hosts (5 % slow) and NCCL progress reports of one job."""
    rng = random.Random(13)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    events: list[dict[str, Any]] = []
    for i in range(1200):
        host = i % 4
        events.append({"id": f"tok-{i}", "kind": "token_latency", "host": f"node-{host}", "gpu": host % 2,
                       "time": format_time(start + timedelta(seconds=i * 0.5)), "source": "fleet-test",
                       "attrs": {"endpoint": f"/v1/e{host % 2}", "tokens": 50, "ttft_ms": 300.0,
                                 "itl_p99_ms": 40.0, "itl_max_ms": 450.0 if rng.random() < 0.05 else 60.0}})
    for i in range(40):
        events.append({"id": f"nccl-{i}", "kind": "nccl_progress", "host": f"node-{i % 2}", "rank": i % 2,
                       "job": "job-7", "time": format_time(start + timedelta(seconds=i * 15)), "source": "fleet-test",
                       "attrs": {"op": "ALLREDUCE", "seq": 100 + i, "state": "aborted" if i == 30 else "progressing",
                                 "lag": 0}})
    events.sort(key=lambda e: (e["time"], e["id"]))
    return events


def _expected(events: list[dict[str, Any]]) -> Counter[tuple[str, str, int, str]]:
    """(slo, group key, minute, good|total) → count, from the shipped indicators applied to each event."""
    counts: Counter[tuple[str, str, int, str]] = Counter()
    rulebooks, problems = load_directory(RULES)
    assert not problems
    slis = [compile_sli(slo.indicator) for rb in rulebooks for slo in rb.slos.values() if slo.indicator]
    for item in events:
        event = parse_event(item)
        for compiled in slis:
            sli = compiled.sli
            if event.kind != sli.kind or not compiled.is_request(event):
                continue
            key = group_key({name: event.get(name) for name in sli.group_by})
            minute = int(event.timestamp // 60)
            counts[sli.slo_id, key, minute, "total"] += 1
            counts[sli.slo_id, key, minute, "good"] += compiled.is_good(event)
    return +counts


def _stored(database: Database) -> Counter[tuple[str, str, int, str]]:
    counts: Counter[tuple[str, str, int, str]] = Counter()
    with database.engine.connect() as connection:
        for slo, key, minute, good, total in connection.execute(text(
                "SELECT slo_id, group_key, minute, good, total FROM slo_buckets")):
            counts[slo, key, int(minute), "total"] += int(total)
            counts[slo, key, int(minute), "good"] += int(good)
    return +counts


@pytest.mark.xfail(strict=True, reason="issue 19, open: fleet workers count no SLIs yet; the write path stores them "
                   "(engine_output.record_result) but an event reaches one partition per key space, so the "
                   "counts need a routing of their own (docs/fleet.md)")
def test_workers_count_the_sli_buckets(cluster: NatsCluster, bus: Bus, fleet_database: Database,
                                       tmp_path: Path) -> None:
    events = _events()
    expected = _expected(events)
    assert {slo for slo, *_ in expected} == {"token-latency", "first-token-latency", "training-progress"}
    table = RoutingTable.of(load_directory(RULES)[0], PARTITIONS)
    workers = [WorkerProcess(name, fleet_database, cluster.urls, tmp_path, partitions=PARTITIONS)
               for name in ("s1", "s2")]
    total = len(table.all_partitions())
    try:
        for worker in workers:
            worker.start()
        wait_for(lambda: sum(owned_partitions(fleet_database).values()) == total, 60, "the partitions owned")
        assert publish(Publisher(bus, refresh_s=0.5), events) == (0, 0)
        wait_for(lambda: caught_up(bus, fleet_database, table), 90, "the workers storing every event")
    finally:
        for worker in workers:
            worker.stop()
    assert _stored(fleet_database) == expected
