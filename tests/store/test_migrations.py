"""The Alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Index, inspect

from gpuslo.engine.store import Database
from gpuslo.engine.store.db import migrations_folder
from gpuslo.engine.store.models import Base


def _schema_diff(database: Database) -> list[object]:
    with database.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True,
                                                               "compare_server_default": True})
        return list(compare_metadata(context, Base.metadata))


def _cli_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", migrations_folder())
    config.set_main_option("sqlalchemy.url", url)
    return config


def test_migrated_schema_matches_models(database: Database) -> None:
    assert _schema_diff(database) == []


def test_partial_unique_indexes_exist(database: Database) -> None:
    indexes = {ix["name"]: ix for ix in inspect(database.engine).get_indexes("violations")}
    assert indexes["uq_violations_active_rule_group"]["unique"]
    ours = [ix for ix in Base.metadata.tables["violations"].indexes if isinstance(ix, Index) and ix.unique]
    assert [ix.name for ix in ours] == ["uq_violations_active_rule_group"]


def test_revisions_have_messages_and_readable_names() -> None:
    scripts = ScriptDirectory(migrations_folder())
    for revision in scripts.walk_revisions():
        assert revision.doc, f"revision {revision.revision} has no message"
        assert Path(revision.path).name.startswith(f"{revision.revision}_"), revision.path
    assert len(scripts.get_heads()) == 1, "the revisions must form one line"
    assert scripts.get_revision("0002").down_revision == "0001"


def test_cli_style_upgrade_downgrade_and_offline_sql(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli' / 'gpuslo.db'}"
    config = _cli_config(url)
    command.upgrade(config, "head")
    database = Database(url)
    try:
        assert _schema_diff(database) == []
        command.downgrade(config, "base")
        assert set(inspect(database.engine).get_table_names()) == {"alembic_version"}
        database.upgrade()
        assert _schema_diff(database) == []
    finally:
        database.dispose()
    out = io.StringIO()
    with redirect_stdout(out):
        command.upgrade(_cli_config("postgresql://nobody@localhost/none"), "head", sql=True)
    assert "CREATE UNIQUE INDEX uq_violations_active_rule_group" in out.getvalue()
    assert "WHERE status <> 'resolved'" in out.getvalue()


def test_upgrade_twice_is_a_no_op(database: Database) -> None:
    database.upgrade()
    assert _schema_diff(database) == []
