"""Read back, at start, the settings durability depends on, and refuse to run without them unless allowed.

SQLite: the pragmas gpuslo sets on every connection (db._SQLITE_PRAGMAS) as the connection reports them; a
pool listener, a plugin or a file system without WAL support can leave them otherwise. PostgreSQL:
`synchronous_commit` and `fsync` as the server applies them to gpuslo's sessions (server, database or role
settings): `off` loses acknowledged ingests and human actions on a crash of the server or a power loss.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.store.db import _SQLITE_DEFAULT_SYNC, _SQLITE_PRAGMAS, Database, describe_error

log = logging.getLogger(__name__)
_SYNC_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
ALLOW_HINT = "set allow_unsafe_durability = true to start anyway"


@dataclass(frozen=True)
class Reading:
    """One setting: what gpuslo needs, what the database reports."""

    name: str
    wanted: str
    found: str

    @property
    def ok(self) -> bool:
        return self.wanted.lower() == self.found.lower()


def _sqlite_wanted(in_memory: bool, sync: str) -> dict[str, str]:
    wanted = {}
    for pragma in _SQLITE_PRAGMAS:
        name, _, value = pragma.removeprefix("PRAGMA ").partition("=")
        wanted[name] = value
    wanted["synchronous"] = str(_SYNC_LEVELS[sync])  # the level the connection was last set to
    wanted["foreign_keys"] = "1" if wanted["foreign_keys"].upper() in ("ON", "1") else "0"
    if in_memory:
        wanted.pop("journal_mode")  # an in-memory database has no WAL
    return wanted


def read_sqlite(database: Database) -> list[Reading]:
    with database.engine.connect() as connection:
        sync = connection.connection.info.get("gpuslo_sync", _SQLITE_DEFAULT_SYNC)
        in_memory = database.engine.url.database in (None, "", ":memory:")
        found = []
        for name, wanted in _sqlite_wanted(in_memory, sync).items():
            value = connection.exec_driver_sql(f"PRAGMA {name}").scalar()
            found.append(Reading(name, wanted, str(value)))
        connection.rollback()
    return found


def read_postgres(database: Database) -> list[Reading]:
    with database.engine.connect() as connection:
        readings = [Reading(name, "on", str(connection.execute(text(f"SHOW {name}")).scalar()))
                    for name in ("synchronous_commit", "fsync")]
        connection.rollback()
    # remote_write / remote_apply / local still flush locally before the commit returns.
    return [Reading(r.name, r.found, r.found) if r.name == "synchronous_commit" and r.found != "off" else r
            for r in readings]


def check_durability(database: Database, *, allow_unsafe: bool = False) -> Sequence[Reading]:
    """Read the settings back; ConfigError naming each one that is off, or (allowed) a warning per one."""
    try:
        readings = read_sqlite(database) if database.dialect == "sqlite" else read_postgres(database)
    except SQLAlchemyError as exc:
        raise describe_error("reading back the database's durability settings", exc) from exc
    bad = [r for r in readings if not r.ok]
    if not bad:
        log.info("database durability settings as required: %s",
                 ", ".join(f"{r.name}={r.found}" for r in readings))
        return readings
    what = "; ".join(f"{r.name} is {r.found!r}, gpuslo needs {r.wanted!r}" for r in bad)
    message = (f"{database.dialect} may lose acknowledged writes (accepted events, human actions, audit rows) "
               f"on a crash or power loss: {what}")
    if not allow_unsafe:
        raise ConfigError(f"{message}; fix the database setting or {ALLOW_HINT}")
    log.warning("UNSAFE DURABILITY (allowed by allow_unsafe_durability): %s", message)
    return readings
