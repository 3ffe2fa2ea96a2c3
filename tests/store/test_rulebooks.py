"""Rulebook load records: one row per distinct successful content, every failure kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuslo.engine.store import Database
from gpuslo.engine.store.repository import list_rulebook_versions, record_rulebook_load

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _load(database: Database, minutes: int, *, content_hash: str = "h1", error: str | None = None,
          name: str = "memory", path: str = "rules/memory.yaml") -> None:
    with database.session() as session:
        record_rulebook_load(session, name=name, version="1", content_hash=content_hash, path=path,
                             source="rulebook: memory\n", error=error, now=T0 + timedelta(minutes=minutes))


def test_identical_reload_bumps_loaded_at_instead_of_adding_a_row(database: Database) -> None:
    _load(database, 0)
    _load(database, 5, path="rules/moved/memory.yaml")
    with database.session(readonly=True) as session:
        (only,) = list_rulebook_versions(session)
    assert (only.name, only.content_hash, only.error) == ("memory", "h1", None)
    assert only.loaded_at == T0 + timedelta(minutes=5) and only.path == "rules/moved/memory.yaml"
    assert only.source == "rulebook: memory\n" and only.version == "1"


def test_new_content_and_failures_add_rows_newest_first(database: Database) -> None:
    _load(database, 0)
    _load(database, 1, content_hash="h2")
    _load(database, 2, content_hash="h3", error="rules/memory.yaml:3:1: unknown field")
    _load(database, 3, content_hash="h3", error="rules/memory.yaml:3:1: unknown field")
    _load(database, 4, name="latency")
    with database.session(readonly=True) as session:
        rows = list_rulebook_versions(session)
        limited = list_rulebook_versions(session, limit=2)
    assert [(r.name, r.content_hash, r.loaded_at) for r in rows] == [
        ("latency", "h1", T0 + timedelta(minutes=4)),
        ("memory", "h3", T0 + timedelta(minutes=3)),
        ("memory", "h3", T0 + timedelta(minutes=2)),
        ("memory", "h2", T0 + timedelta(minutes=1)),
        ("memory", "h1", T0),
    ]
    assert rows[1].error == "rules/memory.yaml:3:1: unknown field"
    assert [r.id for r in limited] == [r.id for r in rows[:2]]
