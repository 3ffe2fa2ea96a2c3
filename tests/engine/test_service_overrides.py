"""The service with a site overrides folder: overrides in force are stored with their hash, a broken override
keeps the rulebook's last good version running, and the watcher reloads when an override file changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationFilter

FRAG = {"kind": "mem_fragmentation", "time": "2026-11-29T12:00:00Z", "host": "node-7", "gpu": 3,
        "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 1000, "largest_free_bytes": 290}}
RAISED = "rulebook: memory\nrules:\n  fragmentation-high:\n    if: fragmentation_ratio > 0.8\n"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    rules, site = tmp_path / "rules", tmp_path / "rules.d"
    rules.mkdir()
    site.mkdir()
    shutil.copy(Path("rules/memory.yaml"), rules / "memory.yaml")
    shutil.copy(Path("rules/latency.yaml"), rules / "latency.yaml")
    (site / "memory.yaml").write_text(RAISED)
    return rules, site


def _open(database: Database, rules: Path, site: Path) -> Gpuslo:
    return Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, rules_overrides_dir=site,
                                rules_poll_seconds=0))


def _fired(core: Gpuslo, event_id: str, ratio: float) -> set[str]:
    core.ingest([{**FRAG, "id": event_id, "attrs": {**FRAG["attrs"], "fragmentation_ratio": ratio}}])
    assert core.wait_idle()
    with core.database.session(readonly=True) as session:
        items = repository.list_violations(session, ViolationFilter(), page_size=500).items
    return {v.rule_id for v in items}


def test_the_override_in_force_is_stored_with_its_hash(database, folders):
    rules, site = folders
    core = _open(database, rules, site)
    try:
        (memory,) = [b for b in core.rulebooks.status().rulebooks if b.name == "memory"]
        assert memory.override_file == str(site / "memory.yaml")
        assert "fragmentation-high" not in _fired(core, "ov-1", 0.71)
        assert "fragmentation-high" in _fired(core, "ov-2", 0.85)
        with core.database.session(readonly=True) as session:
            (stored,) = [v for v in repository.list_rulebook_versions(session) if v.name == "memory"]
            (violation,) = repository.list_violations(session, ViolationFilter(), page_size=50).items
        assert stored.content_hash == memory.content_hash and stored.error is None
        assert stored.source.endswith(f"# ---- site override: {site / 'memory.yaml'} ----\n{RAISED}")
        assert (violation.rule_id, violation.rulebook_hash) == ("fragmentation-high", memory.content_hash)
    finally:
        core.close()


def test_a_broken_override_keeps_the_last_good_version_and_a_fix_is_picked_up(database, folders):
    rules, site = folders
    core = _open(database, rules, site)
    try:
        good_hash = core.rulebooks.status().rulebooks[1].content_hash
        assert core.rulebooks.reload_if_changed() is None
        (site / "memory.yaml").write_text(RAISED.replace("0.8", "'high'"))
        status = core.rulebooks.reload_if_changed()  # the watcher sees the override file change
        assert status is not None
        assert [b.name for b in status.rulebooks] == ["latency", "memory"]
        assert status.rulebooks[1].content_hash == good_hash  # the last good (overridden) version runs on
        assert {p.location.file for p in status.problems} == {str(site / "memory.yaml"), str(rules / "memory.yaml")}
        assert "fragmentation-high" not in _fired(core, "ov-2", 0.71)  # still the site's 0.8
        (site / "memory.yaml").write_text(RAISED.replace("0.8", "0.7"))
        status = core.rulebooks.reload_if_changed()
        assert status is not None and status.problems == ()
        assert status.rulebooks[1].content_hash != good_hash
        assert "fragmentation-high" in _fired(core, "ov-3", 0.71)
        with core.database.session(readonly=True) as session:
            errors = [v.error for v in repository.list_rulebook_versions(session) if v.error]
        assert any("cannot be compared with string 'high'" in e for e in errors)
    finally:
        core.close()
