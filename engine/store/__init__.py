"""Storage: the only writer of the database. Database opens it; store.violations writes the engine's matches and
clears, the other modules read and write the rest."""

from gpuslo.engine.store import access_models as _access_models  # noqa: F401  (users, tokens, audit)
from gpuslo.engine.store import fleet_models as _fleet_models  # noqa: F401  (fleet partition offsets)
from gpuslo.engine.store import outbox_models as _outbox_models  # noqa: F401  (registers the outbox tables)
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import (
    EventFilter,
    HistoryEntry,
    Page,
    RulebookVersionView,
    StoredEvent,
    ViolationDetail,
    ViolationFilter,
    ViolationView,
)

__all__ = [
    "Database",
    "EventFilter",
    "HistoryEntry",
    "Page",
    "RulebookVersionView",
    "StoredEvent",
    "ViolationDetail",
    "ViolationFilter",
    "ViolationView",
]
