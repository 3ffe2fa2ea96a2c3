"""The service core on both databases: rulebook reloads, engine backlog and restart, folding."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationFilter

FRAG_EVENT = {"kind": "mem_fragmentation", "time": "2026-11-29T12:00:00Z", "host": "node-7", "gpu": 3,
              "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 1000, "largest_free_bytes": 290}}


def _event(i: int, **changes) -> dict:
    return {**FRAG_EVENT, "id": f"svc-{i}", "time": f"2026-11-29T12:00:{i % 60:02d}Z", **changes}


def _open(database: Database, rules: Path, **overrides) -> Gpuslo:
    return Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, **overrides))


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    directory = tmp_path / "rules"
    directory.mkdir()
    shutil.copy(Path("rules/memory.yaml"), directory / "memory.yaml")
    return directory


def _violations(core: Gpuslo):
    with core.database.session(readonly=True) as session:
        return repository.list_violations(session, ViolationFilter(), page_size=500).items


def test_repeated_matches_fold_into_one_violation(database, rules):
    core = _open(database, rules)
    try:
        core.ingest([_event(i) for i in range(3)])
        assert core.wait_idle()
        (violation,) = [v for v in _violations(core) if v.rule_id == "fragmentation-high"]
        assert violation.occurrences == 3 and violation.status == "open"
        assert violation.explanation["conditions"][1]["text"] == "fragmentation_ratio = 0.71 > 0.65"
    finally:
        core.close()


def test_broken_rulebook_keeps_the_last_good_version_and_reports_the_error(database, rules):
    core = _open(database, rules)
    try:
        (rules / "memory.yaml").write_text((rules / "memory.yaml").read_text().replace("severity: warning",
                                                                                        "severity: loud", 1))
        status = core.rulebooks.reload()
        assert [r.name for r in status.rulebooks] == ["memory"]
        assert any("severity" in str(p) and "memory.yaml" in str(p) for p in status.problems)
        core.ingest([_event(1)])
        assert core.wait_idle()
        assert any(v.rule_id == "fragmentation-high" for v in _violations(core))
        with core.database.session(readonly=True) as session:
            versions = repository.list_rulebook_versions(session)
        assert any(v.error and "severity" in v.error for v in versions)
    finally:
        core.close()


def test_events_beyond_the_queue_are_evaluated_from_the_database(database, rules):
    core = _open(database, rules, engine_queue_size=2)
    try:
        report = core.ingest([_event(i) for i in range(25)])
        assert report.count("accepted") == 25
        assert core.wait_idle(20)
        (violation,) = [v for v in _violations(core) if v.rule_id == "fragmentation-high"]
        assert violation.occurrences == 25
    finally:
        core.close()


def test_events_stored_before_a_crash_are_evaluated_after_restart(database, rules, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    core = _open(database, empty)  # no rules: the engine marks the events processed without matches
    core.runtime.stop()  # as if the process died before the engine got to them
    core.ingest([_event(i) for i in range(4)])
    core.close()
    restarted = _open(database, rules)
    try:
        assert restarted.wait_idle(20)
        (violation,) = [v for v in _violations(restarted) if v.rule_id == "fragmentation-high"]
        assert violation.occurrences == 4
    finally:
        restarted.close()


def test_a_changed_rulebook_file_is_reloaded_and_a_broken_one_refused(database, rules):
    core = _open(database, rules, rules_poll_seconds=0)  # the watcher's job is called by hand here
    try:
        assert core.rulebooks.reload_if_changed() is None  # nothing changed since open()
        path = rules / "memory.yaml"
        path.write_text(path.read_text().replace("fragmentation_ratio > 0.65", "fragmentation_ratio > 0.9", 1))
        status = core.rulebooks.reload_if_changed()
        assert status is not None and status.problems == ()
        rule = status.rulebooks[0].rule("fragmentation-high")
        assert "0.9" in rule.when.pattern.condition_text
        path.write_text(path.read_text().replace("severity: warning", "severity: loud", 1))
        status = core.rulebooks.reload_if_changed()
        assert status is not None and status.problems  # refused ...
        assert "0.9" in status.rulebooks[0].rule("fragmentation-high").when.pattern.condition_text  # ... old runs
        assert core.rulebooks.reload_if_changed() is None
    finally:
        core.close()


def test_a_failed_store_is_retried_without_evaluating_the_events_twice(database, rules):
    core = _open(database, rules)
    original, calls = core.engine_store.record, []

    def flaky(result):
        calls.append(len(result.events))
        if len(calls) == 1:
            raise RuntimeError("database went away")
        original(result)

    core.runtime._sink = flaky
    try:
        core.ingest([_event(i) for i in range(3)])
        assert core.wait_idle(20)
        (violation,) = [v for v in _violations(core) if v.rule_id == "fragmentation-high"]
        assert violation.occurrences == 3  # stored once, after the retry: nothing counted twice
        assert calls[0] == calls[1] == 3
    finally:
        core.close()
