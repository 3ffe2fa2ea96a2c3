"""SQLAlchemy table models; portable across SQLite and PostgreSQL. Rows never leave the store package."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# At most this many evidence rows per violation: the first EVIDENCE_KEEP_FIRST and the latest rest.
EVIDENCE_LIMIT = 200
EVIDENCE_KEEP_FIRST = 20

# Kept in step with gpuslo.engine.violations.STATUSES; a test checks it.
STATUS_CHECK = "status IN ('open', 'acknowledged', 'resolved')"
ACTIONS = ("created", "folded", "acknowledged", "resolved", "reopened", "commented", "notification_dead",
           "notification_retried")
ACTION_LENGTH = 32  # HistoryRow.action; the longest name in ACTIONS must fit (a test checks it)
ACTION_CHECK = "action IN (" + ", ".join(f"'{a}'" for a in ACTIONS) + ")"
ACTIVE_WHERE = "status <> 'resolved'"
LOADED_WHERE = "error IS NULL"


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (SQLite drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given; the store only takes aware times")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}
    if TYPE_CHECKING:
        # Every model maps one Table (DeclarativeBase allows any FromClause), so insert/update/delete take it.
        __table__: ClassVar[Table]


_UNPROCESSED = "processed_at IS NULL"


class EventRow(Base):
    """One ingested event; `body` is Event.to_dict(), the rest are copies for filtering."""

    __tablename__ = "events"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    time: Mapped[datetime]
    host: Mapped[str] = mapped_column(String(253))
    gpu: Mapped[int | None] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(64))
    pid: Mapped[int | None] = mapped_column(Integer)
    job: Mapped[str | None] = mapped_column(String(200))
    rank: Mapped[int | None] = mapped_column(Integer)
    source: Mapped[str | None] = mapped_column(String(64))
    body: Mapped[dict[str, Any]]
    body_hash: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime]
    processed_at: Mapped[datetime | None]
    time_sent: Mapped[str | None] = mapped_column(String(64))  # the time as written, when canonical drops a part
    error: Mapped[str | None] = mapped_column(Text)  # quarantined: why the engine could not evaluate or store it

    __table_args__ = (
        Index("ix_events_kind_time", "kind", "time"),
        Index("ix_events_host_time", "host", "time"),
        Index("ix_events_gpu", "gpu"),
        # The engine's queue: only unprocessed events, in the order it reads them back. Every ingested event
        # enters it and leaves it when its batch is stored, so it stays as small as the backlog; a full index
        # on processed_at grew with the table and cost each insert and each processed_at update (0009).
        Index("ix_events_unprocessed", "time", "id", sqlite_where=text(_UNPROCESSED),
              postgresql_where=text(_UNPROCESSED)),
    )


class ViolationRow(Base):
    """A rule that fired for one group key; later matches fold into it until it is resolved."""

    __tablename__ = "violations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule_id: Mapped[str] = mapped_column(String(200))
    rule_title: Mapped[str] = mapped_column(Text)
    rulebook: Mapped[str] = mapped_column(String(200))
    rulebook_version: Mapped[str] = mapped_column(String(64))
    rulebook_hash: Mapped[str] = mapped_column(String(128))
    slo: Mapped[str] = mapped_column(String(200))
    slo_objective: Mapped[str] = mapped_column(Text)
    severity: Mapped[str] = mapped_column(String(32))
    group_key: Mapped[str] = mapped_column(String(512))
    group: Mapped[dict[str, Any]]
    host: Mapped[str | None] = mapped_column(String(253))
    gpu: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    occurrences: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    remediation: Mapped[str] = mapped_column(Text)
    runbook: Mapped[str | None] = mapped_column(Text)
    explanation: Mapped[dict[str, Any]]
    labels: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # Lifecycle (migration 0002); see gpuslo.engine.transitions for what each one decides.
    # The latest match, or a human reopen: auto-resolve counts from here (NULL only on rows from before 0002).
    quiet_since: Mapped[datetime | None]
    last_notified_at: Mapped[datetime | None]  # the latest notification-worthy change (trigger or repeat)
    acknowledged_at: Mapped[datetime | None]
    acknowledged_by: Mapped[str | None] = mapped_column(String(200))
    resolved_at: Mapped[datetime | None]
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    flaps: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    flapping: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    repeat_interval_s: Mapped[float] = mapped_column(Float, server_default=text("14400"))
    flap_window_s: Mapped[float] = mapped_column(Float, server_default=text("600"))
    resolve_after_s: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (
        CheckConstraint(STATUS_CHECK, name="status"),
        Index("ix_violations_rule_id_group_key_status", "rule_id", "group_key", "status"),
        # At most one unresolved violation per rule and group: concurrent folds cannot split it in two.
        Index("uq_violations_active_rule_group", "rule_id", "group_key", unique=True,
              sqlite_where=text(ACTIVE_WHERE), postgresql_where=text(ACTIVE_WHERE)),
        Index("ix_violations_status_last_seen", "status", "last_seen"),
        Index("ix_violations_severity", "severity"),
        Index("ix_violations_host", "host"),
        Index("ix_violations_slo", "slo"),
        Index("ix_violations_rule_id_group_key_resolved_at", "rule_id", "group_key", "resolved_at"),
    )


class EvidenceRow(Base):
    """Links a violation to an event that proves it; `position` keeps the order they were added."""

    __tablename__ = "evidence"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    violation_id: Mapped[int] = mapped_column(ForeignKey("violations.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(ForeignKey("events.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    added_at: Mapped[datetime]

    __table_args__ = (
        UniqueConstraint("violation_id", "event_id"),
        Index("ix_evidence_violation_id_position", "violation_id", "position"),
        Index("ix_evidence_event_id", "event_id"),
    )


class RulebookVersionRow(Base):
    """A rulebook load, successful or not; identical successful content is one row whose loaded_at moves."""

    __tablename__ = "rulebook_versions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    content_hash: Mapped[str] = mapped_column(String(128))
    path: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    loaded_at: Mapped[datetime]
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("uq_rulebook_versions_name_content_hash", "name", "content_hash", unique=True,
              sqlite_where=text(LOADED_WHERE), postgresql_where=text(LOADED_WHERE)),
        Index("ix_rulebook_versions_loaded_at", "loaded_at"),
    )


class HistoryRow(Base):
    """Append-only log of what happened to a violation and who did it."""

    __tablename__ = "violation_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    violation_id: Mapped[int] = mapped_column(ForeignKey("violations.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    action: Mapped[str] = mapped_column(String(ACTION_LENGTH))
    actor: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]]
    status_before: Mapped[str | None] = mapped_column(String(16))
    status_after: Mapped[str | None] = mapped_column(String(16))
    source: Mapped[str | None] = mapped_column(String(64))  # the client address of a human or API action
    comment: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(ACTION_CHECK, name="action"),
        Index("ix_violation_history_violation_id_at", "violation_id", "at"),
    )


class SilenceRow(Base):
    """Mutes notifications of violations whose fields equal every matcher, from starts_at until ends_at."""

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    matchers: Mapped[dict[str, Any]]
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    author: Mapped[str] = mapped_column(String(200))
    comment: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    expired_at: Mapped[datetime | None]
    expired_by: Mapped[str | None] = mapped_column(String(200))

    __table_args__ = (
        Index("ix_silences_expired_at_ends_at", "expired_at", "ends_at"),
    )


class SloBucketRow(Base):
    """good/total requests of one SLO group in one minute (engine/slo); `attributed`: bad ones charged to a
    violation. Kept for the SLO window plus a margin."""

    __tablename__ = "slo_buckets"

    slo_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    group_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # seconds since the epoch // 60
    good: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[int] = mapped_column(BigInteger)
    attributed: Mapped[int] = mapped_column(BigInteger)

    # Covering: the API's range sums read the index alone, in minute order (bench/slo.py (b)).
    __table_args__ = (Index("ix_slo_buckets_slo_id_minute", "slo_id", "minute", "group_key", "good", "total",
                            "attributed"),)


class SloHourRow(Base):
    """The same counts rolled up per hour (written beside the minutes), so a 28-day window sums ~700 rows."""

    __tablename__ = "slo_hours"

    slo_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    group_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # minute // 60
    good: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[int] = mapped_column(BigInteger)
    attributed: Mapped[int] = mapped_column(BigInteger)

    # Covering: in group order for one group's hourly history (the chart); in time order for the API's range
    # pieces (engine/slo/ranges.py, bench/slo.py (b)).
    __table_args__ = (Index("ix_slo_hours_slo_id_group_key_hour", "slo_id", "group_key", "hour", "good", "total",
                            "attributed"),
                      Index("ix_slo_hours_slo_id_hour", "slo_id", "hour", "group_key", "good", "total", "attributed"))


class SloDayRow(Base):
    """The same counts rolled up per UTC day, so a 28-day window sums 28 rows per group and its edges."""

    __tablename__ = "slo_days"

    slo_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    group_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    day: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # minute // 1440
    good: Mapped[int] = mapped_column(BigInteger)
    total: Mapped[int] = mapped_column(BigInteger)
    attributed: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_slo_days_slo_id_day", "slo_id", "day", "group_key", "good", "total", "attributed"),)


class SloCauseRow(Base):
    """Bad requests of one SLO group in one minute charged to a violation open for them at their time."""

    __tablename__ = "slo_causes"

    slo_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    group_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    violation_id: Mapped[int] = mapped_column(ForeignKey("violations.id", ondelete="CASCADE"), primary_key=True)
    bad: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_slo_causes_violation_id", "violation_id"),
                      Index("ix_slo_causes_slo_id_minute", "slo_id", "minute"))
