"""The stateful model of the incident lifecycle and the outbox (outbox_model.py), run by Hypothesis.

SQLite: 1,000 examples on one migrated database file (in /dev/shm when there is one), emptied before each
example; PostgreSQL: a few examples on the session's database, emptied likewise. GPUSLO_MODEL_EXAMPLES raises
the SQLite count for a longer run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from outbox_model import OutboxMachine

from gpuslo.engine.store.db import Database

SQLITE_EXAMPLES = int(os.environ.get("GPUSLO_MODEL_EXAMPLES", "1000"))
POSTGRES_EXAMPLES = 15
STEPS = 12
FAST = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


def _run(machine: type[OutboxMachine], examples: int) -> None:
    test = machine.TestCase
    test.settings = settings(max_examples=examples, stateful_step_count=STEPS, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.too_slow], database=None)
    test("runTest").runTest()
    print(f"{machine.__name__}: {machine.examples} examples, {machine.steps} steps")
    assert machine.examples >= examples


def test_outbox_model_on_sqlite(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(dir=FAST)) if FAST else tmp_path
    database = Database(f"sqlite:///{folder / 'model.db'}")
    database.upgrade()

    class SqliteMachine(OutboxMachine):
        pass

    worker = SqliteMachine.bind(database)
    try:
        _run(SqliteMachine, SQLITE_EXAMPLES)
    finally:
        worker.close()
        database.dispose()
        if FAST:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.postgres
def test_outbox_model_on_postgresql(postgres_database: Database) -> None:
    class PostgresMachine(OutboxMachine):
        pass

    worker = PostgresMachine.bind(postgres_database)
    try:
        _run(PostgresMachine, POSTGRES_EXAMPLES)
    finally:
        worker.close()
