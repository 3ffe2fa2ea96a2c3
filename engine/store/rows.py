"""Rows to frozen views, and the one way to append to a violation's history; shared by the store modules."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store.db import describe_error
from gpuslo.engine.store.models import HistoryRow, SilenceRow, ViolationRow
from gpuslo.engine.store.read_models import HistoryEntry, SilenceView, ViolationView
from gpuslo.engine.transitions import ENGINE_ACTOR

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def store_operation(function: Callable[P, R]) -> Callable[P, R]:
    """Driver errors of `function` come out as StoreError naming it."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except SQLAlchemyError as exc:
            raise describe_error(function.__name__, exc) from exc

    return wrapper


def chunks(items: Sequence[T], size: int) -> Iterator[list[T]]:
    """`items` in lists of at most `size`: the bound parameters of one IN (...) stay within every driver's limit."""
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


def require_aware(moment: datetime, what: str) -> None:
    if moment.tzinfo is None:
        raise StoreError(f"{what}: naive datetime {moment.isoformat()}; give a timezone-aware time")


def violation_fields(row: ViolationRow, notify: str | None = None) -> dict[str, Any]:
    """The ViolationView fields of a row; `notify` is what the change that produced it means for receivers."""
    return {
        "id": row.id, "rule_id": row.rule_id, "rule_title": row.rule_title, "rulebook": row.rulebook,
        "rulebook_version": row.rulebook_version, "rulebook_hash": row.rulebook_hash, "slo": row.slo,
        "slo_objective": row.slo_objective, "severity": row.severity, "group_key": row.group_key,
        "group": MappingProxyType(dict(row.group)), "host": row.host, "gpu": row.gpu, "status": row.status,
        "first_seen": row.first_seen, "last_seen": row.last_seen, "occurrences": row.occurrences,
        "summary": row.summary, "remediation": row.remediation, "runbook": row.runbook,
        "explanation": MappingProxyType(dict(row.explanation)), "labels": MappingProxyType(dict(row.labels)),
        "created_at": row.created_at, "updated_at": row.updated_at,
        "quiet_since": row.quiet_since or row.updated_at, "last_notified_at": row.last_notified_at,
        "acknowledged_at": row.acknowledged_at, "acknowledged_by": row.acknowledged_by,
        "resolved_at": row.resolved_at, "resolved_by": row.resolved_by, "flaps": row.flaps or 0,
        "flapping": bool(row.flapping), "repeat_interval_s": row.repeat_interval_s,
        "flap_window_s": row.flap_window_s, "resolve_after_s": row.resolve_after_s, "notify": notify,
    }


def violation_view(row: ViolationRow, notify: str | None = None) -> ViolationView:
    return ViolationView(**violation_fields(row, notify))


def columns_view(columns: Mapping[str, Any], notify: str | None = None) -> ViolationView:
    """violation_view of a violation held as column values (what the Core statements of the engine's write
    path read and change) instead of an ORM row."""
    return ViolationView(**{**columns, "group": MappingProxyType(dict(columns["group"])),
                            "explanation": MappingProxyType(dict(columns["explanation"])),
                            "labels": MappingProxyType(dict(columns["labels"])),
                            "quiet_since": columns["quiet_since"] or columns["updated_at"],
                            "flaps": columns["flaps"] or 0, "flapping": bool(columns["flapping"])}, notify=notify)


def expire_violations(session: Session, ids: Iterable[int]) -> None:
    """Core statements changed these violations: ORM rows of them the session holds are read again when used."""
    if not session.identity_map:
        return
    for violation_id in ids:
        row = session.identity_map.get(identity_key(ViolationRow, violation_id))
        if row is not None:
            session.expire(row)


def history_entry(row: HistoryRow) -> HistoryEntry:
    return HistoryEntry(row.id, row.violation_id, row.at, row.action, row.actor, MappingProxyType(dict(row.detail)),
                        row.status_before, row.status_after, row.source, row.comment)


def silence_view(row: SilenceRow) -> SilenceView:
    return SilenceView(row.id, MappingProxyType(dict(row.matchers)), row.starts_at, row.ends_at, row.author,
                       row.comment, row.created_at, row.expired_at, row.expired_by)


def append_history(session: Session, violation_id: int, at: datetime, action: str, detail: dict[str, Any], *,
                   actor: str = ENGINE_ACTOR, before: str | None = None, after: str | None = None,
                   source: str | None = None, comment: str | None = None) -> None:
    """Append one history line: who did what, the status before and after, and from which address."""
    session.add(HistoryRow(**history_values(violation_id, at, action, detail, actor=actor, before=before,
                                            after=after, source=source, comment=comment)))
    session.flush()


def history_values(violation_id: int, at: datetime, action: str, detail: dict[str, Any], *,
                   actor: str = ENGINE_ACTOR, before: str | None = None, after: str | None = None,
                   source: str | None = None, comment: str | None = None) -> dict[str, Any]:
    """The columns of one history line (append_history's), for an executemany INSERT of many."""
    return {"violation_id": violation_id, "at": at, "action": action, "actor": actor, "detail": detail,
            "status_before": before, "status_after": after, "source": source, "comment": comment}
