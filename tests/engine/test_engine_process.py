"""The engine in a child process (setting `engine_process`) on both databases: evaluation from the stored events,
kill -9 of the child mid-stream (every acked event evaluated exactly once), restart and health, rulebook reloads
reaching the child, a clean shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.engine_process import EngineProcess
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import EventRow, ViolationRow

FRAG = {"kind": "mem_fragmentation", "host": "node-7", "gpu": 3,
        "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 1000, "largest_free_bytes": 290}}


def _event(i: int) -> dict[str, object]:
    """One fragmentation-high occurrence (a single-event rule): the violation's occurrences count events."""
    return {**FRAG, "id": f"proc-{i}", "time": f"2026-11-29T12:{i // 60 % 60:02d}:{i % 60:02d}Z"}


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    directory.mkdir()
    shutil.copy(Path("rules/memory.yaml"), directory / "memory.yaml")
    return directory


@pytest.fixture
def core(database: Database, rules: Path):
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, engine_process=True))
    yield core
    core.close()


def _engine(core: Gpuslo) -> EngineProcess:
    assert isinstance(core.runtime, EngineProcess)
    return core.runtime


def _occurrences(core: Gpuslo, rule_id: str = "fragmentation-high") -> int:
    with core.database.session(readonly=True) as session:
        total = session.execute(select(func.sum(ViolationRow.occurrences))
                                .where(ViolationRow.rule_id == rule_id)).scalar()
    return int(total or 0)


def _unprocessed(core: Gpuslo) -> int:
    with core.database.session(readonly=True) as session:
        return int(session.execute(select(func.count()).where(EventRow.processed_at.is_(None))).scalar_one())


def _wait_healthy(core: Gpuslo, other_than: int | None = None, timeout: float = 30.0) -> int:
    """The child's pid once it reports healthy (and, with `other_than`, once it is a new child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = _engine(core).pid
        if pid is not None and pid != other_than and core.engine_health().ok:
            return pid
        time.sleep(0.02)
    raise AssertionError(f"the engine process did not become healthy: {core.engine_health()}")


def test_the_engine_evaluates_in_a_child_process(core):
    pid = _wait_healthy(core)
    assert pid != os.getpid()
    report = core.ingest([_event(i) for i in range(30)])
    assert report.count("accepted") == 30
    assert core.wait_idle(30)
    assert _occurrences(core) == 30 and _unprocessed(core) == 0


def test_kill_9_of_the_engine_child_loses_no_acked_event_and_evaluates_none_twice(core):
    """Events are POSTed in tens while the child is killed (SIGKILL) three times mid-stream: a killed batch's
    transaction rolls back with its processed_at, and the next child evaluates it once."""
    engine = _engine(core)
    pid = _wait_healthy(core)
    total, acked = 1200, []
    done = threading.Event()

    def post() -> None:
        try:
            for start in range(0, total, 10):
                report = core.ingest([_event(i) for i in range(start, start + 10)])
                acked.append(report.count("accepted"))
                time.sleep(0.002)
        finally:
            done.set()

    poster = threading.Thread(target=post)
    poster.start()
    kills = 0
    while kills < 3:
        time.sleep(0.15)
        os.kill(pid, signal.SIGKILL)
        kills += 1
        pid = _wait_healthy(core, other_than=pid)
    poster.join(60)
    assert done.is_set() and sum(acked) == total
    assert core.wait_idle(60)
    assert engine.restarts >= 3
    assert _unprocessed(core) == 0
    assert _occurrences(core) == total  # one more: an event evaluated twice; one fewer: a lost event


def test_a_killed_child_shows_in_health_and_a_new_one_takes_over(core):
    engine = _engine(core)
    pid = _wait_healthy(core)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while core.engine_health().ok and time.monotonic() < deadline:
        time.sleep(0.005)
    down = core.engine_health()
    assert not down.ok and "engine process" in (down.reason or "")
    new_pid = _wait_healthy(core, other_than=pid)
    assert engine.restarts == 1 and new_pid != pid
    core.ingest([_event(1)])
    assert core.wait_idle(30) and _occurrences(core) == 1


def test_a_reload_reaches_the_child(core, rules):
    _wait_healthy(core)
    core.ingest([_event(1)])
    assert core.wait_idle(30) and _occurrences(core) == 1
    memory = rules / "memory.yaml"
    memory.write_text(memory.read_text().replace("if: fragmentation_ratio > 0.65", "if: fragmentation_ratio > 0.9"))
    status = core.rulebooks.reload()
    assert not status.problems
    core.ingest([_event(2)])
    assert core.wait_idle(30)
    assert _occurrences(core) == 1  # 0.71 no longer raises in the child


def test_close_stops_the_child(database, rules):
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, engine_process=True))
    engine = _engine(core)
    _wait_healthy(core)
    proc = engine._proc  # noqa: SLF001
    assert proc is not None
    core.close()
    assert proc.returncode == 0


def test_events_beyond_the_queues_are_read_back_from_the_database(database, rules):
    """A queue of 5 in the child and a sender bound of 5 in the parent: POSTs of 25 overflow both; every event
    is still evaluated once, from the database."""
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, engine_process=True,
                                engine_queue_size=5))
    try:
        _wait_healthy(core)
        for start in range(0, 100, 25):
            assert core.ingest([_event(i) for i in range(start, start + 25)]).count("accepted") == 25
        assert core.wait_idle(30)
        assert _occurrences(core) == 100 and _unprocessed(core) == 0
    finally:
        core.close()


def test_events_past_the_sender_bound_keep_their_order_and_the_stored_counts_match_a_reference(database, rules):
    """test_engine_queue_order's scenario across the process boundary: POSTs of 15 with a bound of 10 overflow
    the parent's sender, so they are read back from the database; the child evaluates everything once, in
    arrival order, and an order-sensitive count (oom-storm) stores what a reference evaluation gives."""
    from test_engine_queue_order import _ooms, _reference, _stored

    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, engine_process=True,
                                engine_queue_size=10))
    evaluated: list[str] = []
    try:
        _wait_healthy(core)
        _engine(core).report_done(lambda ids, _raised, _at: evaluated.extend(ids))
        time.sleep(0.2)  # the child reads "report_done" before the first batch
        first, second = _ooms(0, 15), _ooms(15, 15, offset_s=600)
        assert core.ingest(first).count("accepted") == 15
        assert core.ingest(second).count("accepted") == 15
        assert core.wait_idle(30)
        reference = _reference(rules, first + second)
        assert reference == {"oom-storm": 10, "cuda-oom": 30}
        assert _stored(core) == reference
        deadline = time.monotonic() + 5
        while len(evaluated) < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert evaluated == [item["id"] for item in first + second]  # arrival order, each once
    finally:
        core.close()
