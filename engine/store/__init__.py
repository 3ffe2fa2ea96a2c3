"""Storage: the only writer of the database. Database opens it; repository functions read and write it."""

from gpuslo.engine.store.db import Database
from gpuslo.engine.store.views import (
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
