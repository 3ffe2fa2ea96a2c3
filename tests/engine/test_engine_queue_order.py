"""The engine's queue overflow on both databases: events that did not fit are read back in order, never overtaken.

bench/engine.py once stored 3 occurrences more on PostgreSQL than a reference evaluation of the same events: the
queue had filled, the events that did not fit stayed in the database, and the following POSTs' events were queued
ahead of them whenever the engine made room. The stored ones were read back only when the queue ran dry, tens of
seconds of event time late, and a count and a correlation paired different events.
"""

from __future__ import annotations

import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from engine_support import T0
from sqlalchemy import func, select

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.events import format_time, parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import ViolationRow

QUEUE = 10


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    directory.mkdir()
    shutil.copy(Path("rules/memory.yaml"), directory / "memory.yaml")  # oom-storm: 3 OOMs on one GPU within 5 min
    return directory


def _ooms(first: int, count: int, offset_s: float = 0.0) -> list[dict[str, object]]:
    """CUDA OOMs one second apart on one GPU: every third completes an oom-storm, whose window then restarts."""
    return [{"id": f"oom-{i:03d}", "kind": "cuda_oom", "time": format_time(T0 + timedelta(seconds=offset_s + i)),
             "host": "node-1", "gpu": 0, "attrs": {"api": "cudaMalloc", "requested_bytes": 1 << 20}}
            for i in range(first, first + count)]


def _reference(rules: Path, items: list[dict[str, object]]) -> dict[str, int]:
    evaluator = RuleEvaluator()
    evaluator.load(load_directory(rules)[0])
    counted: dict[str, int] = {}
    for match in evaluator.evaluate([parse_event(item) for item in items]):
        counted[match.rule_id] = counted.get(match.rule_id, 0) + 1
    return counted


def _stored(core: Gpuslo) -> dict[str, int]:
    with core.database.session(readonly=True) as session:
        rows = session.execute(select(ViolationRow.rule_id, func.sum(ViolationRow.occurrences))
                               .group_by(ViolationRow.rule_id)).all()
    return {rule_id: int(total) for rule_id, total in rows}


def _wait(condition: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def test_events_beyond_a_full_queue_keep_their_order_and_the_stored_counts_match_a_reference(database: Database,
                                                                                             rules: Path) -> None:
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, engine_queue_size=QUEUE))
    evaluated: list[str] = []
    taken = threading.Event()
    release = threading.Event()
    record = core.runtime._sink  # noqa: SLF001  # the core's own sink, held until the second POST is in

    def held(result: EngineResult) -> None:
        if result.events:
            evaluated.extend(event.id for event in result.events)
            taken.set()
            assert release.wait(20), "the test never released the engine"
        record(result)

    core.runtime._sink = held  # noqa: SLF001
    # The second POST is 10 minutes later: its OOMs form storms of their own, apart from the first's.
    first, second = _ooms(0, 15), _ooms(15, 15, offset_s=600)
    try:
        assert core.ingest(first).count("accepted") == 15  # 10 queued, 5 stay stored: the queue is full
        assert taken.wait(10)  # the engine holds the first 10 and is storing them
        _wait(lambda: core.runtime.queue_depth() == 0, "the engine to take the queued events")
        assert core.ingest(second).count("accepted") == 15  # the queue has room again, but 5 older events wait
        release.set()
        assert core.wait_idle(20)
        reference = _reference(rules, first + second)
        assert reference == {"oom-storm": 10, "cuda-oom": 30}  # 5 storms in each POST
        assert _stored(core) == reference
        assert evaluated == [item["id"] for item in first + second]  # arrival order, each once
    finally:
        release.set()
        core.close()
