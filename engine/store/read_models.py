"""Frozen read models the store hands out, and the filters it takes; ORM rows never leave the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from gpuslo.engine.events import Event, format_time
from gpuslo.engine.transitions import ViolationLifecycle

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; `total` counts every item matching the filter."""

    items: tuple[T, ...]
    page: int
    page_size: int
    total: int
    has_next: bool


@dataclass(frozen=True)
class ViolationFilter:
    """Every field optional; `since`/`until` bound last_seen (inclusive); `host` and `rule_id` ending in `*` are
    prefixes and `text` is a substring of host, rule, title or summary (store.search)."""

    status: str | None = None
    severity: str | None = None
    slo: str | None = None
    rule_id: str | None = None
    host: str | None = None
    gpu: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None


@dataclass(frozen=True)
class EventFilter:
    """Every field optional; `since`/`until` bound the event time (inclusive)."""

    kind: str | None = None
    host: str | None = None
    gpu: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    job: str | None = None


@dataclass(frozen=True)
class ViolationView(ViolationLifecycle):
    """A violation as stored (its lifecycle values in ViolationLifecycle, gpuslo.engine.transitions explains
    each); `explanation` is Explanation.to_dict() of the latest match."""

    id: int
    rule_title: str
    rulebook_version: str
    rulebook_hash: str
    slo: str
    slo_objective: str
    severity: str
    host: str | None
    gpu: int | None
    summary: str
    remediation: str
    runbook: str | None
    explanation: Mapping[str, Any]
    labels: Mapping[str, str]
    # What the change that produced this view means for receivers (trigger, repeat, acknowledge, resolve);
    # None when nothing should be sent or the view was only read. Never stored.
    notify: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, times as RFC 3339 UTC."""
        out: dict[str, Any] = {"id": self.id}
        for name in ViolationView.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = format_time(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[name] = value
        return out


@dataclass(frozen=True)
class HistoryEntry:
    """One line of a violation's audit trail."""

    id: int
    violation_id: int
    at: datetime
    action: str
    actor: str
    detail: Mapping[str, Any]
    status_before: str | None = None
    status_after: str | None = None
    source: str | None = None
    comment: str | None = None


@dataclass(frozen=True)
class ViolationDetail(ViolationView):
    """A violation with its evidence events (time order) and history (oldest first)."""

    evidence: tuple[Event, ...]
    history: tuple[HistoryEntry, ...]


@dataclass(frozen=True)
class SilenceView:
    """A silence: mutes violations matching every matcher between starts_at and ends_at, unless expired."""

    id: int
    matchers: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime
    author: str
    comment: str
    created_at: datetime
    expired_at: datetime | None
    expired_by: str | None

    def active_at(self, now: datetime) -> bool:
        """True when the silence mutes notifications at `now`."""
        return self.expired_at is None and self.starts_at <= now < self.ends_at


@dataclass(frozen=True)
class StoredEvent:
    """An event with when it arrived and when the engine evaluated it (None: not yet)."""

    event: Event
    received_at: datetime
    processed_at: datetime | None
    error: str | None = None  # quarantined, or a body stored before ingest checked what it checks now
    time_sent: str | None = None  # the time as the client wrote it, when the canonical form drops a part


@dataclass(frozen=True)
class RulebookVersionView:
    """A rulebook load; `error` is set when the load failed."""

    id: int
    name: str
    version: str
    content_hash: str
    path: str
    source: str
    loaded_at: datetime
    error: str | None
