"""events queue index: ix_events_processed_at (every event, by processed_at) becomes ix_events_unprocessed, a
partial index on (time, id) of the unprocessed events only, the engine's queue in the order it is read

Revision ID: 0009_events_unprocessed
Revises: 0008_slo_days
Create Date: 2026-12-03 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_events_unprocessed"
down_revision: str | None = "0008_slo_days"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNPROCESSED = sa.text("processed_at IS NULL")


def upgrade() -> None:
    op.drop_index("ix_events_processed_at", table_name="events")
    op.create_index("ix_events_unprocessed", "events", ["time", "id"], sqlite_where=_UNPROCESSED,
                    postgresql_where=_UNPROCESSED)


def downgrade() -> None:
    op.drop_index("ix_events_unprocessed", table_name="events")
    op.create_index("ix_events_processed_at", "events", ["processed_at"])
