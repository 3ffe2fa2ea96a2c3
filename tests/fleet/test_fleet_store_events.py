"""What a fleet worker keeps of the events in PostgreSQL, on the real 3-node cluster and the real PostgreSQL: by
default only those its rows cite (the evidence of a violation, the event of a clear that resolved one), the
stream being the event log; with store_events="all", every event it reads, as the embedded core does. The
violations, their evidence and history are the same either way."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fleet_support import RULES, caught_up, wait_for
from sqlalchemy import text

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import ConfigError
from gpuslo.engine.events import format_time, parse_event
from gpuslo.engine.fleet.bus import Bus, StreamSettings
from gpuslo.engine.fleet.partition import PartitionSettings
from gpuslo.engine.fleet.publish import Publisher
from gpuslo.engine.fleet.worker import Worker, WorkerSettings
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.store.db import Database

START = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)


def _fragmentation(event_id: str, host: str, second: int, ratio: float) -> dict[str, Any]:
    return {"id": event_id, "kind": "mem_fragmentation", "host": host, "gpu": 0, "source": "store-test",
            "time": format_time(START + timedelta(seconds=second)),
            "attrs": {"scope": "allocator", "free_bytes": 4 << 30, "largest_free_bytes": int((1 - ratio) * (4 << 30)),
                      "fragmentation_ratio": ratio}}


def _events() -> list[dict[str, Any]]:
    """node-1: healthy samples (clears of nothing), one high (a violation), healthy again (the first of these
    resolves it, the rest resolve nothing); node-2: healthy only; both: heartbeats."""
    events = [_fragmentation(f"a{i}", "node-1", i, 0.2) for i in range(5)]
    events += [_fragmentation("high", "node-1", 10, 0.8)]
    events += [_fragmentation(f"b{i}", "node-1", 20 + i, 0.2) for i in range(5)]
    events += [_fragmentation(f"c{i}", "node-2", i, 0.2) for i in range(5)]
    events += [{"id": f"hb{i}", "kind": "probe_status", "host": f"node-{1 + i % 2}", "source": "store-test",
                "time": format_time(START + timedelta(seconds=i)), "attrs": {"probe": "nvml", "state": "up"}}
               for i in range(6)]
    return sorted(events, key=lambda e: e["time"])


def _run(bus: Bus, database: Database, store_events: str) -> tuple[dict[str, bool], list[tuple[str, str]],
                                                                      list[tuple[str, str]]]:
    """Run one worker over the events; (stored event id → processed, violations (rule, status), history
    (action, event id cited))."""
    settings = Settings(database_url=database.url, rules_dir=RULES, rules_poll_seconds=0)
    worker = Worker(settings, bus, database, WorkerSettings(
        partitions=2, rebalance_s=0.5, fetch_timeout_s=0.2, stream=StreamSettings(replicas=3), name="store-test",
        partition=PartitionSettings(store_events=store_events)), Metrics())
    worker.prepare()
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(worker.runners) == len(worker.table.all_partitions()), 20, "owning every partition")
        assert "accepted" in Publisher(bus).publish([parse_event(e) for e in _events()])
        wait_for(lambda: caught_up(bus, database, worker.table), 30, "storing the stream")
    finally:
        stop.set()
        thread.join(20)
    with database.engine.connect() as connection:
        stored = {r[0]: r[1] is not None for r in connection.execute(text("SELECT id, processed_at FROM events"))}
        violations = [tuple(r) for r in connection.execute(text(
            "SELECT rule_id, status FROM violations WHERE rule_id = 'fragmentation-high'"))]
        history = [(str(r[0]), str(r[1] or "")) for r in connection.execute(text(
            "SELECT h.action, h.detail ->> 'event_id' FROM violation_history h ORDER BY h.id"))]
    return stored, violations, history  # type: ignore[return-value]


def test_by_default_only_the_events_rows_cite_are_stored(bus: Bus, fleet_database: Database) -> None:
    stored, violations, history = _run(bus, fleet_database, "evidence")
    assert stored == {"high": True, "b0": True}  # the evidence, and the clear that resolved it
    assert violations == [("fragmentation-high", "resolved")]
    assert ("resolved", "b0") in history


def test_with_store_events_all_every_event_read_is_stored(bus: Bus, fleet_database: Database) -> None:
    stored, violations, history = _run(bus, fleet_database, "all")
    assert stored == {e["id"]: True for e in _events()}
    assert violations == [("fragmentation-high", "resolved")]
    assert ("resolved", "b0") in history


def test_an_unknown_store_events_setting_is_refused() -> None:
    with pytest.raises(ConfigError, match="store_events"):
        PartitionSettings(store_events="some")
